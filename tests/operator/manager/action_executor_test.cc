// ActionExecutor against the in-process fake API server: the DeleteOptions each delete sends.
#include "operator/manager/action_executor.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

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
