// LeaderElector: two candidates against an in-memory Lease store that honours resourceVersion.
#include "operator/kube/leader_election.h"

#include <gtest/gtest.h>

#include "common/rfc3339.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

using std::chrono::milliseconds;
using testing::Eventually;
using testing::FakeApiServer;
using testing::StatusBody;

constexpr char kLeasePath[] = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/korovod-operator";

class LeaseStore {
 public:
  explicit LeaseStore(FakeApiServer& fake) {
    fake.server().Get(kLeasePath, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (lease_.is_null()) return NotFound(res);
      res.set_content(lease_.dump(), "application/json");
    });
    fake.server().Post("/apis/coordination.k8s.io/v1/namespaces/ns/leases",
                       [this](const httplib::Request& req, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu_);
                         if (!lease_.is_null()) {
                           res.status = 409;
                           res.set_content(StatusBody(409, "AlreadyExists", "exists"),
                                           "application/json");
                           return;
                         }
                         lease_ = nlohmann::json::parse(req.body);
                         lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
                         res.status = 201;
                         res.set_content(lease_.dump(), "application/json");
                       });
    fake.server().Put(kLeasePath, [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (lease_.is_null()) return NotFound(res);
      auto update = nlohmann::json::parse(req.body);
      if (update["metadata"].value("resourceVersion", "") !=
          lease_["metadata"]["resourceVersion"].get<std::string>()) {
        ++conflicts_;
        res.status = 409;
        res.set_content(StatusBody(409, "Conflict", "the object has been modified"),
                        "application/json");
        return;
      }
      lease_ = update;
      lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
      res.set_content(lease_.dump(), "application/json");
    });
  }
  nlohmann::json lease() {
    std::lock_guard<std::mutex> lock(mu_);
    return lease_;
  }
  void Set(nlohmann::json lease) {
    std::lock_guard<std::mutex> lock(mu_);
    lease_ = std::move(lease);
    lease_["metadata"]["resourceVersion"] = std::to_string(++rv_);
  }

 private:
  static void NotFound(httplib::Response& res) {
    res.status = 404;
    res.set_content(StatusBody(404, "NotFound", "leases \"korovod-operator\" not found"),
                    "application/json");
  }
  std::mutex mu_;
  nlohmann::json lease_;
  int rv_ = 0;
  int conflicts_ = 0;
};

LeaderElectionConfig Config(const std::string& identity, std::atomic<int>* started,
                            std::atomic<int>* stopped) {
  LeaderElectionConfig c;
  c.namespace_name = "ns";
  c.lease_name = "korovod-operator";
  c.identity = identity;
  c.lease_duration = milliseconds(1000);
  c.renew_deadline = milliseconds(800);
  c.retry_period = milliseconds(100);
  c.on_started_leading = [started] { ++*started; };
  c.on_stopped_leading = [stopped] { ++*stopped; };
  return c;
}

TEST(LeaderElectionTest, ExactlyOneLeadsAndAStandbyTakesOverAfterStop) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  std::atomic<int> a_started{0}, a_stopped{0}, b_started{0}, b_stopped{0};
  auto a = std::make_unique<LeaderElector>(*client, Config("a", &a_started, &a_stopped));
  auto b = std::make_unique<LeaderElector>(*client, Config("b", &b_started, &b_stopped));
  a->Start();
  b->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader() || b->IsLeader(); }));
  // Over several renewals there is never more than one leader, and the leader does not change.
  const bool a_leads = a->IsLeader();
  for (int i = 0; i < 40; ++i) {
    ASSERT_FALSE(a->IsLeader() && b->IsLeader());
    ASSERT_EQ(a->IsLeader(), a_leads);
    std::this_thread::sleep_for(milliseconds(10));
  }
  LeaderElector& leader = a_leads ? *a : *b;
  LeaderElector& standby = a_leads ? *b : *a;
  const std::string leader_id = a_leads ? "a" : "b";
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], leader_id);
  EXPECT_EQ(store.lease()["spec"]["leaseDurationSeconds"], 1);
  const std::string renew = store.lease()["spec"]["renewTime"];
  EXPECT_EQ(renew.size(), std::string("2026-11-22T12:00:00.000000Z").size()) << renew;
  EXPECT_TRUE(ParseRfc3339(renew).ok());

  const auto stop_at = std::chrono::steady_clock::now();
  leader.Stop();
  EXPECT_FALSE(leader.IsLeader());
  EXPECT_EQ((a_leads ? a_stopped : b_stopped).load(), 1);
  ASSERT_TRUE(Eventually([&] { return standby.IsLeader(); }, milliseconds(2000)));
  // Released, not expired: the standby takes over at its next try, well within the lease.
  EXPECT_LT(std::chrono::steady_clock::now() - stop_at, milliseconds(900));
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], a_leads ? "b" : "a");
  EXPECT_GE(store.lease()["spec"]["leaseTransitions"].get<int>(), 1);
  EXPECT_EQ((a_leads ? b_started : a_started).load(), 1);
  standby.Stop();
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], "");
}

TEST(LeaderElectionTest, TakesOverOnlyAnExpiredLease) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  std::atomic<int> started{0}, stopped{0};
  LeaderElector elector(*client, Config("me", &started, &stopped));
  const auto now = std::chrono::system_clock::now();
  nlohmann::json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                          {"kind", "Lease"},
                          {"metadata", {{"name", "korovod-operator"}, {"namespace", "ns"}}},
                          {"spec",
                           {{"holderIdentity", "ghost"},
                            {"leaseDurationSeconds", 15},
                            {"renewTime", FormatRfc3339(now, 6)},
                            {"leaseTransitions", 3}}}};
  store.Set(lease);
  auto held = elector.TryAcquireOrRenew();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_FALSE(held.value());  // fresh: ghost keeps it
  lease["spec"]["renewTime"] = FormatRfc3339(now - std::chrono::seconds(20), 6);
  store.Set(lease);
  held = elector.TryAcquireOrRenew();
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_TRUE(held.value());
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], "me");
  EXPECT_EQ(store.lease()["spec"]["leaseTransitions"], 4);
  held = elector.TryAcquireOrRenew();  // a renewal is not a transition
  EXPECT_TRUE(held.ok() && held.value());
  EXPECT_EQ(store.lease()["spec"]["leaseTransitions"], 4);
}

}  // namespace
}  // namespace korovod::kube
