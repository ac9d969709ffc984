// ActionExecutor against the in-process fake API server: the DeleteOptions each delete sends,
// and runs of pod creates in slow-start batches.
#include "operator/manager/action_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/http/metrics_registry.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

Action PodDelete(const std::string& name, bool force) {
  Action a;
  a.kind = Action::Kind::kDelete;
  a.object = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", "uid-" + name}}}};
  a.reason = "test";
  a.force = force;
  return a;
}

// A pod stuck terminating is force-deleted: gracePeriodSeconds 0 (what `kubectl delete --force
// --grace-period=0` sends), still with the uid precondition; other deletes leave the grace
// period to the pod.
TEST(ActionExecutor, ForceDeleteSendsGracePeriodZero) {
  kube::testing::FakeApiServer fake;
  std::mutex mu;
  std::map<std::string, json> bodies;
  fake.server().Delete("/api/v1/namespaces/ns/pods/(.*)",
                       [&](const httplib::Request& req, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu);
                         bodies[req.matches[1]] = json::parse(req.body);
                         res.set_content("{}", "application/json");
                       });
  fake.Start();
  auto client = fake.Client();
  auto registry = std::make_unique<http::MetricsRegistry>();
  auto metrics = OperatorMetrics::Create(*registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  kube::EventRecorder events(*client, "korovod-operator");
  ActionExecutor executor(*client, events, **metrics);
  const json job = {{"metadata", {{"name", "j"}, {"namespace", "ns"}}}};

  ASSERT_TRUE(executor.Execute(job, PodDelete("stuck", true)).ok());
  ASSERT_TRUE(executor.Execute(job, PodDelete("graceful", false)).ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies["stuck"]["gracePeriodSeconds"], 0) << bodies["stuck"].dump();
  EXPECT_EQ(bodies["stuck"]["preconditions"]["uid"], "uid-stuck");
  EXPECT_FALSE(bodies["graceful"].contains("gracePeriodSeconds")) << bodies["graceful"].dump();
  EXPECT_EQ(bodies["graceful"]["preconditions"]["uid"], "uid-graceful");
}

Action PodCreate(int i) {
  Action a;
  a.kind = Action::Kind::kCreate;
  a.object = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p" + std::to_string(i)}, {"namespace", "ns"}}}};
  a.reason = "worker " + std::to_string(i);
  return a;
}

// Serves pod creates (recording each, and how many were in flight at once; a create waits up
// to 200 ms for a second one to arrive, so that a batch's creates overlap), and events.
class CreatesServer {
 public:
  explicit CreatesServer(std::string refused = "") : refused_(std::move(refused)) {
    fake_.server().Post(
        "/api/v1/namespaces/ns/pods", [this](const httplib::Request& req, httplib::Response& res) {
          const std::string name = json::parse(req.body)["metadata"]["name"];
          std::unique_lock<std::mutex> lock(mu_);
          created_.push_back(name);
          max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
          cv_.notify_all();
          cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return in_flight_ >= 2; });
          --in_flight_;
          if (name == refused_) {
            res.status = 403;
            res.set_content(kube::testing::StatusBody(403, "Forbidden", "denied by a webhook"),
                            "application/json");
            return;
          }
          res.status = 201;
          res.set_content(req.body, "application/json");
        });
    fake_.server().Post("/api/v1/namespaces/ns/events",
                        [this](const httplib::Request& req, httplib::Response& res) {
                          std::lock_guard<std::mutex> lock(mu_);
                          events_.push_back(json::parse(req.body).value("reason", ""));
                          res.status = 201;
                          res.set_content(req.body, "application/json");
                        });
    fake_.Start();
    client_ = fake_.Client();
    registry_ = std::make_unique<http::MetricsRegistry>();
    metrics_ = std::move(OperatorMetrics::Create(*registry_)).value();
    recorder_ = std::make_unique<kube::EventRecorder>(*client_, "korovod-operator");
    executor_ = std::make_unique<ActionExecutor>(*client_, *recorder_, *metrics_);
  }
  const ActionExecutor& executor() { return *executor_; }
  std::vector<std::string> created() {
    std::lock_guard<std::mutex> lock(mu_);
    return created_;
  }
  int max_in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  const std::string refused_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> created_;
  std::vector<std::string> events_;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  std::unique_ptr<kube::ApiClient> client_;
  std::unique_ptr<http::MetricsRegistry> registry_;
  std::unique_ptr<OperatorMetrics> metrics_;
  std::unique_ptr<kube::EventRecorder> recorder_;
  std::unique_ptr<ActionExecutor> executor_;
  kube::testing::FakeApiServer fake_;  // last: stopped first
};

// A run of pod creates goes in slow-start batches (1, 2, 4, ... 16 at once), not one by one.
TEST(ActionExecutor, PodCreatesGoInBatches) {
  CreatesServer server;
  std::vector<Action> actions;
  for (int i = 0; i < 40; ++i) actions.push_back(PodCreate(i));
  std::vector<std::string> applied;
  std::mutex mu;
  const json job = {{"metadata", {{"name", "j"}, {"namespace", "ns"}}}};
  Status s = server.executor().ExecuteAll(job, actions, [&](const Action& a) {
    std::lock_guard<std::mutex> lock(mu);
    applied.push_back(a.object["metadata"]["name"]);
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(server.created().size(), 40u);
  EXPECT_EQ(applied.size(), 40u);
  EXPECT_GE(server.max_in_flight(), 2) << "the creates went one at a time";
  EXPECT_LE(server.max_in_flight(), ActionExecutor::kMaxParallelPodCreates);
}

// A refused create ends the run after its batch: p0 | p1 p2 | p3 p4 p5 p6 (p4 refused), and
// p7..p19 are left to the next reconcile. The refusal reaches the job's events.
TEST(ActionExecutor, AFailedBatchEndsTheRun) {
  CreatesServer server("p4");
  std::vector<Action> actions;
  for (int i = 0; i < 20; ++i) actions.push_back(PodCreate(i));
  const json job = {{"metadata", {{"name", "j"}, {"namespace", "ns"}}}};
  Status s = server.executor().ExecuteAll(job, actions, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("denied by a webhook"), std::string::npos) << s.message();
  std::vector<std::string> created = server.created();
  std::sort(created.begin(), created.end());
  EXPECT_EQ(created, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4", "p5", "p6"}));
  EXPECT_EQ(server.events(), std::vector<std::string>{"FailedCreate"});
}

// A replica whose lease is gone (the fence says so) sends nothing: a deposed leader's worker
// that runs on for a moment after a pause must not race the new leader's writes.
TEST(ActionExecutor, FencedReplicaWritesNothing) {
  kube::testing::FakeApiServer fake;
  std::mutex mu;
  int requests = 0;
  fake.server().Post("/api/v1/namespaces/ns/(.*)",
                     [&](const httplib::Request&, httplib::Response& res) {
                       std::lock_guard<std::mutex> lock(mu);
                       ++requests;
                       res.status = 201;
                       res.set_content("{}", "application/json");
                     });
  fake.server().Delete("/api/v1/namespaces/ns/pods/(.*)",
                       [&](const httplib::Request&, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu);
                         ++requests;
                         res.set_content("{}", "application/json");
                       });
  fake.Start();
  auto client = fake.Client();
  auto registry = std::make_unique<http::MetricsRegistry>();
  auto metrics = OperatorMetrics::Create(*registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  kube::EventRecorder events(*client, "korovod-operator");
  bool leading = true;
  ActionExecutor executor(*client, events, **metrics, [&leading] { return leading; });
  const json job = {{"metadata", {{"name", "j"}, {"namespace", "ns"}, {"uid", "u"}}}};
  Action create;
  create.kind = Action::Kind::kCreate;
  create.object = {
      {"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "p"}, {"namespace", "ns"}}}};
  create.reason = "test";

  ASSERT_TRUE(executor.Execute(job, create).ok());
  ASSERT_TRUE(executor.CheckMayWrite().ok());
  leading = false;
  for (const Action& a : {create, PodDelete("p", false)}) {
    const Status s = executor.Execute(job, a);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("no longer holds the leader lease"), std::string::npos)
        << s.ToString();
  }
  EXPECT_FALSE(executor.CheckMayWrite().ok());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(requests, 1);
}

}  // namespace
}  // namespace korovod::k8s_operator
