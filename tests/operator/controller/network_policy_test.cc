// The worker NetworkPolicy (opt-in, --worker-network-policy): its selectors (the job's workers;
// peers the same job's workers and the operator's pods in the operator's namespace, in one
// peer), its child metadata, and the reconciler creating it once per job and only when enabled.
#include "operator/controller/network_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "operator/api/json.h"
#include "operator/controller/reconciler.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::FakeCluster;
using testing::MinimalJob;

constexpr int64_t kT0 = 1'800'000'000;

OperatorSettings WithPolicy() {
  OperatorSettings s;
  s.worker_network_policy.operator_namespace = "korovod-system";
  s.worker_network_policy.operator_pod_labels = {{"app.kubernetes.io/name", "korovod"},
                                                 {"app.kubernetes.io/instance", "rel"}};
  return s;
}

int CreatedPolicies(const ReconcileResult& r) {
  int n = 0;
  for (const Action& a : r.actions) {
    if (a.kind == Action::Kind::kCreate && a.object.value("kind", "") == "NetworkPolicy") ++n;
  }
  return n;
}

TEST(WorkerNetworkPolicy, AdmitsOnlyTheJobsWorkersAndTheOperatorsPods) {
  auto job = HorovodJobFromJson(MinimalJob(3));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const json p = BuildWorkerNetworkPolicy(*job, WithPolicy());
  EXPECT_EQ(p["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(p["kind"], "NetworkPolicy");
  EXPECT_EQ(p["metadata"]["name"], "j-workers");
  EXPECT_EQ(p["metadata"]["namespace"], "ns");
  EXPECT_EQ(p["metadata"]["labels"]["korovod.dev/job-name"], "j");
  ASSERT_EQ(p["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ(p["metadata"]["ownerReferences"][0]["controller"], true);
  const json workers = json::parse(
      R"({"matchLabels": {"korovod.dev/job-name": "j", "korovod.dev/role": "worker"}})");
  EXPECT_EQ(p["spec"]["podSelector"], workers);
  EXPECT_EQ(p["spec"]["policyTypes"], json::array({"Ingress"}));  // egress untouched
  // One rule, no port list (the data port is ephemeral; torch's store, MASTER_PORT, is open to
  // the job's workers too): from the job's workers, or from the operator's pods in its namespace
  // (both selectors in one peer: an AND, not an OR).
  ASSERT_EQ(p["spec"]["ingress"].size(), 1u);
  EXPECT_FALSE(p["spec"]["ingress"][0].contains("ports"));
  EXPECT_EQ(p["spec"]["ingress"][0]["from"], json::parse(R"([
      {"podSelector": {"matchLabels": {"korovod.dev/job-name": "j",
                                       "korovod.dev/role": "worker"}}},
      {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "korovod-system"}},
       "podSelector": {"matchLabels": {"app.kubernetes.io/instance": "rel",
                                       "app.kubernetes.io/name": "korovod"}}}])"));
}

TEST(WorkerNetworkPolicy, TheReconcilerCreatesItOnceAndOnlyWhenEnabled) {
  FakeCluster off(MinimalJob(2));
  off.Settle(kT0);
  EXPECT_TRUE(off.network_policies().empty());

  FakeCluster on(MinimalJob(2));
  on.settings() = WithPolicy();
  EXPECT_EQ(CreatedPolicies(on.Step(kT0)), 1);
  ASSERT_EQ(on.network_policies().size(), 1u);
  EXPECT_EQ(on.network_policies()[0]["metadata"]["name"], "j-workers");
  EXPECT_EQ(CreatedPolicies(on.Step(kT0 + 1)), 0);  // observed: not created again
  on.SetAllPodsPhase("Running");
  EXPECT_EQ(CreatedPolicies(on.Step(kT0 + 2)), 0);
  // Deleted by someone: the next reconcile puts it back.
  on.network_policies().clear();
  EXPECT_EQ(CreatedPolicies(on.Step(kT0 + 3)), 1);
}

}  // namespace
}  // namespace korovod::k8s_operator
