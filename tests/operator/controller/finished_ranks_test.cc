// operator/controller: each rank's terminal state is kept in status.finishedRanks and honoured
// once its pod is gone (PodGC, a removed node): a static job neither counts a finished rank as
// lost nor restarts or recreates it, and finishes once every rank succeeded; an elastic job
// creates no replacement once a worker succeeded, and a failed worker keeps counting against
// backoffLimit. A new leader rebuilds the membership from the compact status.elastic.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/reconciler.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::FakeCluster;
using testing::MinimalJob;

constexpr int64_t kT0 = 1'800'000'000;

int CountCreatedPods(const ReconcileResult& r) {
  return static_cast<int>(std::count_if(r.actions.begin(), r.actions.end(), [](const Action& a) {
    return a.kind == Action::Kind::kCreate && a.object.value("kind", "") == "Pod";
  }));
}

FakeCluster RunningStaticJob(int replicas) {
  FakeCluster c(MinimalJob(replicas));
  c.Step(kT0);
  c.SetAllPodsPhase("Running");
  for (const std::string& name : c.PodNames()) c.SetPodReady(name, true);
  c.Step(kT0 + 1);
  EXPECT_EQ(c.status()["phase"], "Running");
  return c;
}

TEST(FinishedRanks, AStaticRankThatSucceededAndWasGarbageCollectedIsNotLost) {
  FakeCluster c = RunningStaticJob(3);
  c.SetTrainerExit("j-worker-1", 0, "Completed");
  c.Step(kT0 + 2);
  EXPECT_EQ(c.status()["finishedRanks"],
            json::parse(R"([{"ranks": "1", "state": "Succeeded", "reason": "Completed"}])"));
  c.RemovePod("j-worker-1");  // PodGC, or its node was removed
  ReconcileResult r = c.Step(kT0 + 3);
  EXPECT_EQ(CountCreatedPods(r), 0);
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(c.status()["epoch"], 1);
  EXPECT_EQ(c.status()["succeededWorkers"], 1);
  EXPECT_EQ(c.status()["rankSummary"], "Ready:0,2 Succeeded:1");
  EXPECT_EQ(c.PodNames(), (std::vector<std::string>{"j-worker-0", "j-worker-2"}));

  // The others end too, one of their pods gone before the operator saw the last one end.
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  c.Step(kT0 + 4);
  c.RemovePod("j-worker-0");
  c.SetTrainerExit("j-worker-2", 0, "Completed");
  r = c.Step(kT0 + 5);
  EXPECT_EQ(CountCreatedPods(r), 0);
  EXPECT_EQ(c.status()["phase"], "Succeeded");
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(c.status()["succeededWorkers"], 3);
  EXPECT_EQ(c.status()["finishedRanks"][0]["ranks"], "0-2");
}

TEST(FinishedRanks, AFailedRankIsRecordedWithItsCauseAndANewEpochStartsAfresh) {
  FakeCluster c = RunningStaticJob(2);
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  c.Step(kT0 + 2);
  c.SetTrainerExit("j-worker-1", 3, "Error");
  c.Step(kT0 + 3);
  // The failure restarts the world as epoch 2: its ranks have not ended.
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(c.status()["restartCount"], 1);
  EXPECT_FALSE(c.status().contains("finishedRanks")) << c.status().dump();

  // With no restarts left the job fails, and the record says how each rank ended.
  c.spec()["runPolicy"] = {{"backoffLimit", 1}};
  c.FinishTerminations();
  c.Settle(kT0 + 4);
  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 5);
  c.SetTrainerExit("j-worker-1", 137, "OOMKilled");
  c.Step(kT0 + 6);
  EXPECT_EQ(c.status()["phase"], "Failed");
  const json finished = c.status()["finishedRanks"];
  ASSERT_EQ(finished.size(), 1u) << finished.dump();
  EXPECT_EQ(finished[0]["ranks"], "1");
  EXPECT_EQ(finished[0]["state"], "Failed");
  EXPECT_EQ(finished[0]["reason"], "Error");
  EXPECT_NE(finished[0]["message"].get<std::string>().find("137"), std::string::npos)
      << finished.dump();
}

TEST(FinishedRanks, ARecordSurvivesAnOperatorRestart) {
  // The record lives in the status: a reconcile from a fresh process (only the status and the
  // pods left) still honours it.
  FakeCluster c = RunningStaticJob(2);
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  c.Step(kT0 + 2);
  FakeCluster restarted(c.job());
  for (const json& pod : c.pods()) {
    if (pod["metadata"]["name"] != "j-worker-0") restarted.pods().push_back(pod);
  }
  restarted.services() = c.services();
  restarted.secrets() = c.secrets();
  restarted.config_maps() = c.config_maps();
  const ReconcileResult r = restarted.Step(kT0 + 3);
  EXPECT_EQ(CountCreatedPods(r), 0);
  EXPECT_EQ(restarted.status()["phase"], "Running");
  EXPECT_EQ(restarted.status()["restartCount"], 0);
}

// --- elastic jobs --------------------------------------------------------------------------

ReconcileResult ElasticStep(FakeCluster& c, int64_t now,
                            std::optional<ObservedState::ElasticServer> server) {
  ObservedState o = c.Observe(now);
  o.settings.elastic_rendezvous_host = "10.0.0.9";
  o.elastic_server = std::move(server);
  ReconcileResult r = Reconcile(o);
  c.Apply(r);
  return r;
}

std::string Id(FakeCluster& c, const std::string& pod) {
  return pod + "." + c.Pod(pod)->at("metadata")["uid"].get<std::string>();
}

ObservedState::ElasticServer Server(int64_t epoch, std::vector<std::string> members) {
  ObservedState::ElasticServer s;
  s.port = 7000;
  s.epoch = epoch;
  s.members = std::move(members);
  return s;
}

FakeCluster RunningElasticJob(int backoff_limit = 6) {
  json job = MinimalJob(3);
  job["spec"]["elastic"] = {{"minReplicas", 1}};
  job["spec"]["runPolicy"] = {{"backoffLimit", backoff_limit}};
  FakeCluster c(job);
  ElasticStep(c, kT0, std::nullopt);
  ElasticStep(c, kT0 + 1, Server(0, {}));
  c.SetAllPodsPhase("Running");
  ElasticStep(c, kT0 + 2,
              Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")}));
  EXPECT_EQ(c.status()["phase"], "Running");
  return c;
}

TEST(FinishedRanks, AnElasticJobCreatesNoReplacementOnceAWorkerSucceeded) {
  FakeCluster c = RunningElasticJob();
  const auto server = Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")});
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  ElasticStep(c, kT0 + 3, server);
  EXPECT_EQ(c.status()["finishedRanks"][0]["ranks"], "0");
  c.RemovePod("j-worker-0");
  ReconcileResult r = ElasticStep(c, kT0 + 4, server);
  EXPECT_EQ(CountCreatedPods(r), 0);  // training is over: nobody new starts
  EXPECT_EQ(c.status()["succeededWorkers"], 1);
  c.SetTrainerExit("j-worker-1", 0, "Completed");
  c.SetTrainerExit("j-worker-2", 0, "Completed");
  ElasticStep(c, kT0 + 5, server);
  c.RemovePod("j-worker-1");
  r = ElasticStep(c, kT0 + 6, server);
  EXPECT_EQ(CountCreatedPods(r), 0);
  EXPECT_EQ(c.status()["phase"], "Succeeded");
  EXPECT_EQ(c.status()["succeededWorkers"], 3);
}

TEST(FinishedRanks, AnElasticFailureKeepsCountingOnceItsPodIsGone) {
  FakeCluster c = RunningElasticJob(/*backoff_limit=*/1);
  const auto server = Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")});
  c.SetTrainerExit("j-worker-0", 1, "Error");
  ElasticStep(c, kT0 + 3, server);
  EXPECT_EQ(c.status()["restartCount"], 1);
  c.RemovePod("j-worker-0");
  ElasticStep(c, kT0 + 4, server);
  EXPECT_NE(c.Pod("j-worker-3"), nullptr);  // the replacement of the failed worker
  // A second failure: two, more than backoffLimit 1, though the first pod is gone.
  c.SetTrainerExit("j-worker-1", 1, "Error");
  ElasticStep(c, kT0 + 5, server);
  EXPECT_EQ(c.status()["phase"], "Failed");
  EXPECT_EQ(c.status()["failedWorkers"], 2);
}

TEST(FinishedRanks, ANewLeaderTellsAReplacementOfTheSameIndexFromTheMember) {
  FakeCluster c = RunningElasticJob();
  // Worker 1's pod is replaced by another of the same name (a new uid) while no leader ran,
  // and worker 2's is gone.
  json replaced = *c.Pod("j-worker-1");
  replaced["metadata"]["uid"] = "uid-of-the-replacement";
  c.RemovePod("j-worker-1");
  c.RemovePod("j-worker-2");
  c.pods().push_back(replaced);
  const ReconcileResult r = ElasticStep(c, kT0 + 3, std::nullopt);
  ASSERT_TRUE(r.elastic);
  EXPECT_EQ(r.elastic->resume_epoch, 1);
  // No live worker has a gone member's id: the server drops it, and never takes the
  // replacement for the member.
  EXPECT_EQ(r.elastic->resume_members,
            (std::vector<std::string>{Id(c, "j-worker-0"), "j-worker-1.gone", "j-worker-2.gone"}));
}

}  // namespace
}  // namespace korovod::k8s_operator
