// The contract between JobController and the reconciler for Kueue Workloads: where the operator
// watches them (ObservedState::workload_watched: Kueue was served at start), a queued or running
// job is not polled with timed requeues, since the Workload's changes queue it; where it does not,
// it is polled every kKueueWaitPollSeconds while queued and kKueueRunPollSeconds while running.
#include <gtest/gtest.h>

#include "operator/controller/reconciler.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

constexpr int64_t kT0 = 1800000000;

std::optional<int64_t> RequeueAfter(const testing::FakeCluster& c, int64_t now, bool watched) {
  ObservedState o = c.Observe(now);
  o.workload_watched = watched;
  return Reconcile(o).requeue_after_seconds;
}

TEST(KueueWatch, AWatchedWorkloadIsNotPolled) {
  json job = testing::MinimalJob(2);
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"}};
  testing::FakeCluster c(job);
  c.Step(kT0);  // creates the Workload
  ASSERT_EQ(c.workloads().size(), 1u);
  EXPECT_EQ(RequeueAfter(c, kT0 + 1, /*watched=*/false), kKueueWaitPollSeconds);
  EXPECT_EQ(RequeueAfter(c, kT0 + 1, /*watched=*/true), std::nullopt);

  // Admitted: its pods run; an eviction would come as a Workload change.
  json& w = c.workloads().at(0);
  w["status"]["admission"] = {
      {"clusterQueue", "cq"},
      {"podSetAssignments", json::array({{{"name", "worker"}, {"count", 2}}})}};
  w["status"]["conditions"] =
      json::array({{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
                   {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}});
  c.Step(kT0 + 2);
  ASSERT_EQ(c.pods().size(), 2u);
  EXPECT_EQ(RequeueAfter(c, kT0 + 3, /*watched=*/false), kKueueRunPollSeconds);
  // Watched, only the job's own deadlines wake it (here the startup timeout, 600 s after its
  // pods were created), never the poll.
  const std::optional<int64_t> watched = RequeueAfter(c, kT0 + 3, /*watched=*/true);
  EXPECT_TRUE(!watched || *watched > kKueueRunPollSeconds) << *watched;
}

}  // namespace
}  // namespace korovod::k8s_operator
