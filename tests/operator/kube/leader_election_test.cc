// LeaderElector: two candidates against an in-memory Lease store that honours resourceVersion.
#include "operator/kube/leader_election.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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
      Hang();
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
      Hang();
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
  // Requests that arrive while set wait this long before they are answered (an API server that
  // hangs, or a partition that holds the connection).
  std::atomic<int> hang_ms{0};
  void Hang() {
    if (const int ms = hang_ms.load(); ms > 0) std::this_thread::sleep_for(milliseconds(ms));
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

// Issue 31: a renewal that hangs (each request may wait out a 30 s read timeout) must not keep the
// old leader leading past its renew deadline while a standby takes over after the lease.
TEST(LeaderElectionTest, AHungRenewalEndsLeadershipAtTheRenewDeadline) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  std::atomic<int> started{0}, stopped{0};
  LeaderElector a(*client, Config("a", &started, &stopped));
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.IsLeader(); }));
  store.hang_ms = 4000;
  const auto hung_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return !a.IsLeader(); }, milliseconds(3000)));
  // Dropped while the request still hangs, not when it returns.
  EXPECT_LT(std::chrono::steady_clock::now() - hung_at, milliseconds(3500));
  EXPECT_EQ(stopped.load(), 1);
  store.hang_ms = 0;
  a.Stop();
}

TEST(LeaderElectionTest, ALeaderWithItsClockAnHourBehindKeepsTheLease) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  std::atomic<int> a_started{0}, a_stopped{0}, b_started{0}, b_stopped{0};
  LeaderElectionConfig skewed = Config("a", &a_started, &a_stopped);
  skewed.now = [] { return std::chrono::system_clock::now() - std::chrono::hours(1); };
  LeaderElector a(*client, skewed);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.IsLeader(); }));
  LeaderElector b(*client, Config("b", &b_started, &b_stopped));
  b.Start();
  // Three lease durations of renewals: b must see them as renewals, not as an hour-old lease.
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(a.IsLeader()) << "a lost the lease after " << i * 10 << " ms";
    ASSERT_FALSE(b.IsLeader()) << "b took over after " << i * 10 << " ms";
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], std::string("a"));
  EXPECT_EQ(b_started.load(), 0);
  b.Stop();
  a.Stop();
}

// A Lease held by `holder`, as another replica (with its own clock) would have written it.
nlohmann::json HeldLease(const std::string& holder, std::chrono::system_clock::time_point renewed,
                         int duration_s = 15) {
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", "korovod-operator"}, {"namespace", "ns"}}},
          {"spec",
           {{"holderIdentity", holder},
            {"leaseDurationSeconds", duration_s},
            {"acquireTime", FormatRfc3339(renewed - std::chrono::seconds(60), 6)},
            {"renewTime", FormatRfc3339(renewed, 6)},
            {"leaseTransitions", 3}}}};
}

// A candidate whose local monotonic clock the test advances by hand.
struct FakeClockCandidate {
  FakeClockCandidate(const ApiClient& client, const std::string& identity) {
    LeaderElectionConfig c = Config(identity, &started, &stopped);
    c.lease_duration = milliseconds(3000);
    c.steady_now = [this] { return steady; };
    elector = std::make_unique<LeaderElector>(client, std::move(c));
  }
  bool Try() {
    auto held = elector->TryAcquireOrRenew();
    EXPECT_TRUE(held.ok()) << held.status().ToString();
    return held.ok() && held.value();
  }
  std::atomic<int> started{0}, stopped{0};
  std::chrono::steady_clock::time_point steady{};
  std::unique_ptr<LeaderElector> elector;
};

TEST(LeaderElectionTest, AStaleLeaseIsTakenOverOnlyAfterALeaseDurationOfLocalTime) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  FakeClockCandidate me(*client, "me");
  // renewTime is 20 s old by this clock, but that proves nothing: the holder's clock may differ.
  // The record must first stay unchanged for leaseDurationSeconds of local time.
  store.Set(HeldLease("ghost", std::chrono::system_clock::now() - std::chrono::seconds(20)));
  EXPECT_FALSE(me.Try());
  EXPECT_EQ(me.elector->fencing_token(), 0u);  // not led yet
  me.steady += std::chrono::seconds(15) - milliseconds(1);
  EXPECT_FALSE(me.Try()) << "taken over before leaseDurationSeconds";
  me.steady += milliseconds(1);  // expired at exactly leaseDurationSeconds, as in client-go
  EXPECT_TRUE(me.Try());
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], "me");
  EXPECT_EQ(store.lease()["spec"]["leaseTransitions"], 4);
  EXPECT_EQ(store.lease()["spec"]["leaseDurationSeconds"], 3);
  // The transitions it wrote are its fencing token: above the deposed holder's 3.
  EXPECT_EQ(me.elector->fencing_token(), 4u);
  EXPECT_TRUE(me.Try());  // a renewal is not a transition
  EXPECT_EQ(store.lease()["spec"]["leaseTransitions"], 4);
  EXPECT_EQ(me.elector->fencing_token(), 4u);
}

TEST(LeaderElectionTest, AHolderWithItsClockBehindThatKeepsRenewingIsNeverTakenOver) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  FakeClockCandidate me(*client, "me");
  // The holder's clock is an hour behind: every renewTime it writes is long past by ours.
  auto renewed = std::chrono::system_clock::now() - std::chrono::hours(1);
  for (int i = 0; i < 12; ++i) {  // 60 s of local time, four lease durations
    store.Set(HeldLease("ghost", renewed));
    ASSERT_FALSE(me.Try()) << "took over at try " << i << " a lease its holder keeps renewing";
    EXPECT_EQ(store.lease()["spec"]["holderIdentity"], std::string("ghost"));
    renewed += std::chrono::seconds(5);
    me.steady += std::chrono::seconds(5);
  }
}

TEST(LeaderElectionTest, AHolderWithItsClockAheadIsTakenOverOnceItsRecordStopsChanging) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  FakeClockCandidate me(*client, "me");
  // The holder's clock is an hour ahead, then it dies: its last renewTime stays in our future.
  const auto renewed = std::chrono::system_clock::now() + std::chrono::hours(1);
  store.Set(HeldLease("ghost", renewed));
  EXPECT_FALSE(me.Try());
  me.steady += std::chrono::seconds(14);
  store.Set(HeldLease("ghost", renewed + std::chrono::seconds(14)));  // one last renewal
  EXPECT_FALSE(me.Try());
  me.steady += std::chrono::seconds(14);  // 28 s since the first look, 14 s since the renewal
  EXPECT_FALSE(me.Try()) << "the renewal did not restart the wait";
  me.steady += std::chrono::seconds(2);
  EXPECT_TRUE(me.Try()) << "a dead holder's lease with renewTime in the future is never taken";
  EXPECT_EQ(store.lease()["spec"]["holderIdentity"], "me");
  EXPECT_EQ(store.lease()["spec"]["leaseTransitions"], 4);
}

TEST(LeaderElectionTest, AnyChangeOfTheRecordRestartsTheWait) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  FakeClockCandidate me(*client, "me");
  // renewTime never moves (and is long past by our clock); everything else changes in turn.
  nlohmann::json lease =
      HeldLease("ghost", std::chrono::system_clock::now() - std::chrono::hours(1));
  const std::vector<std::function<void()>> changes = {
      [&] { lease["spec"]["holderIdentity"] = "ghost-2"; },
      [&] { lease["spec"]["acquireTime"] = FormatRfc3339(std::chrono::system_clock::now(), 6); },
      [&] { lease["spec"]["leaseTransitions"] = 9; },
      [&] { lease["spec"]["leaseDurationSeconds"] = 16; },
      [] {},  // only metadata.resourceVersion (LeaseStore::Set bumps it)
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    changes[i]();
    store.Set(lease);
    EXPECT_FALSE(me.Try()) << "change " << i << " was not seen";
    me.steady += std::chrono::seconds(10);
  }
  EXPECT_FALSE(me.Try());  // 10 s since the last change, of 16
  me.steady += std::chrono::seconds(7);
  EXPECT_TRUE(me.Try());
}

TEST(LeaderElectionTest, ALeaseWithoutADurationIsTimedWithOurOwn) {
  FakeApiServer fake;
  LeaseStore store(fake);
  fake.Start();
  auto client = fake.Client();
  FakeClockCandidate me(*client, "me");  // lease_duration 3 s
  nlohmann::json lease = HeldLease("ghost", std::chrono::system_clock::now());
  lease["spec"].erase("leaseDurationSeconds");
  store.Set(lease);
  EXPECT_FALSE(me.Try());
  me.steady += std::chrono::seconds(2);
  EXPECT_FALSE(me.Try());
  me.steady += std::chrono::seconds(2);
  EXPECT_TRUE(me.Try());
}

}  // namespace
}  // namespace korovod::kube
