// operator/controller: Reconcile driven as a loop over an in-memory cluster (FakeCluster):
// creation, idempotence, the phase machine, restarts by epoch, backoff, suspend/resume, the
// active deadline, cleanPodPolicy, TTL, invalid specs, deletion, the job key Secret, and workers
// that cannot start.
#include "operator/controller/reconciler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "operator/api/json.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/worker_pod_state.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::FakeCluster;
using testing::MinimalJob;

constexpr int64_t kT0 = 1'800'000'000;  // 2027-01-15T08:00:00Z

std::string KindOf(const Action& a) {
  return a.object.is_object() ? a.object.value("kind", "") : std::string();
}

int CountKind(const ReconcileResult& r, Action::Kind kind, const std::string& object_kind = "") {
  return static_cast<int>(std::count_if(r.actions.begin(), r.actions.end(), [&](const Action& a) {
    return a.kind == kind && (object_kind.empty() || KindOf(a) == object_kind);
  }));
}

std::vector<std::string> Names(const ReconcileResult& r, Action::Kind kind,
                               const std::string& object_kind) {
  std::vector<std::string> names;
  for (const Action& a : r.actions) {
    if (a.kind == kind && KindOf(a) == object_kind) {
      names.push_back(a.object["metadata"]["name"].get<std::string>());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

using testing::FindEvent;

json Condition(const json& status, const std::string& type) {
  if (!status.contains("conditions")) return json();
  for (const json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  return json();
}

std::string Phase(const FakeCluster& c) { return c.status().value("phase", ""); }

std::string Epoch(const json& pod) { return pod["metadata"]["labels"]["korovod.dev/epoch"]; }

// A job whose workers are all Running (and ready) at kT0.
FakeCluster RunningJob(json job = MinimalJob(2)) {
  FakeCluster c(std::move(job));
  c.Step(kT0);
  c.Step(kT0 + 1);  // a gang job's workers come once its PodGroup is observed
  c.SetAllPodsPhase("Running");
  for (const std::string& name : c.PodNames()) c.SetPodReady(name, true);
  c.Step(kT0 + 10);
  EXPECT_EQ(Phase(c), "Running");
  return c;
}

// --- creation ------------------------------------------------------------------------------

TEST(Reconcile, FirstReconcileCreatesExactlyTheChildren) {
  FakeCluster c(MinimalJob(3));
  const ReconcileResult r = c.Step(kT0);
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Service"), std::vector<std::string>{"j"});
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Secret"), std::vector<std::string>{"j-key"});
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "ConfigMap"), std::vector<std::string>{"j-world"});
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1", "j-worker-2"}));
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "PodGroup"), 0);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate), 6);
  for (const Action& a : r.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_FALSE(a.reason.empty());  // the why, for the executor's log
    const json& meta = a.object["metadata"];
    EXPECT_EQ(meta["namespace"], "ns");
    EXPECT_EQ(meta["labels"]["korovod.dev/job-name"], "j");
    EXPECT_EQ(meta["labels"]["app.kubernetes.io/managed-by"], "korovod-operator");
    ASSERT_EQ(meta["ownerReferences"].size(), 1u);
    EXPECT_EQ(meta["ownerReferences"][0],
              json::parse(R"({"apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
                              "name": "j", "uid": "job-uid", "controller": true,
                              "blockOwnerDeletion": true})"));
  }
  ASSERT_TRUE(r.status);
  const json& s = *r.status;
  EXPECT_EQ(s["phase"], "Pending");
  EXPECT_EQ(s["epoch"], 1);
  EXPECT_EQ(s["observedGeneration"], 1);
  EXPECT_EQ(s["startTime"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(s["coordinatorAddress"], "j-worker-0.j.ns.svc.cluster.local:28500");
  EXPECT_EQ(Condition(s, "SpecValid")["status"], "True");
  EXPECT_EQ(Condition(s, "Created")["status"], "True");
  EXPECT_FALSE(s.contains("completionTime"));
  ASSERT_NE(FindEvent(r, "WorkersCreated"), nullptr);
}

TEST(Reconcile, SecondReconcileAndRestartedOperatorCreateNothing) {
  FakeCluster c(MinimalJob(2));
  c.Step(kT0);
  // The second reconcile sees the pods (the counts change) but creates nothing.
  const ReconcileResult again = c.Step(kT0 + 5);
  EXPECT_TRUE(again.actions.empty());
  EXPECT_EQ(c.status()["activeWorkers"], 2);
  const ReconcileResult third = c.Step(kT0 + 6);
  EXPECT_TRUE(third.actions.empty());
  EXPECT_FALSE(third.status) << third.status->dump();
  // A restarted operator sees exactly the same state: same answer.
  const ReconcileResult restarted = Reconcile(c.Observe(kT0 + 7));
  EXPECT_TRUE(restarted.actions.empty());
  EXPECT_FALSE(restarted.status);
}

TEST(Reconcile, IsDeterministic) {
  FakeCluster c(MinimalJob(4));
  const ObservedState o = c.Observe(kT0);
  const ReconcileResult a = Reconcile(o), b = Reconcile(o);
  ASSERT_EQ(a.actions.size(), b.actions.size());
  for (size_t i = 0; i < a.actions.size(); ++i) {
    EXPECT_EQ(a.actions[i].object, b.actions[i].object);
    EXPECT_EQ(a.actions[i].message, b.actions[i].message);
  }
  EXPECT_EQ(a.status, b.status);
}

TEST(Reconcile, ChildrenListedInAnyOrderGiveTheSameResult) {
  FakeCluster c = RunningJob(MinimalJob(3));
  c.SetTrainerExit("j-worker-2", 1, "Error");
  ObservedState o = c.Observe(kT0 + 20);
  const ReconcileResult a = Reconcile(o);
  std::reverse(o.pods.begin(), o.pods.end());
  const ReconcileResult b = Reconcile(o);
  ASSERT_EQ(a.actions.size(), b.actions.size());
  for (size_t i = 0; i < a.actions.size(); ++i) EXPECT_EQ(a.actions[i].object, b.actions[i].object);
}

// --- phases --------------------------------------------------------------------------------

TEST(Reconcile, PendingRunningSucceededWithCounts) {
  FakeCluster c(MinimalJob(2));
  c.Step(kT0);
  c.SetPodPhase("j-worker-0", "Running");
  c.Step(kT0 + 1);
  EXPECT_EQ(Phase(c), "Pending");
  EXPECT_EQ(c.status()["activeWorkers"], 2);

  c.SetPodPhase("j-worker-1", "Running");
  c.SetPodReady("j-worker-0", true);
  c.Step(kT0 + 2);
  EXPECT_EQ(Phase(c), "Running");
  EXPECT_EQ(c.status()["readyWorkers"], 1);
  EXPECT_EQ(c.status()["activeWorkers"], 2);
  EXPECT_EQ(Condition(c.status(), "Running")["status"], "True");

  // One trainer done while the pod's sidecar still shuts down: counted succeeded, job running.
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  c.SetPodPhase("j-worker-0", "Running");
  c.Step(kT0 + 3);
  EXPECT_EQ(Phase(c), "Running");
  EXPECT_EQ(c.status()["succeededWorkers"], 1);
  EXPECT_EQ(c.status()["activeWorkers"], 1);

  c.SetTrainerExit("j-worker-1", 0, "Completed");
  const ReconcileResult done = c.Step(kT0 + 4);
  EXPECT_EQ(Phase(c), "Succeeded");
  EXPECT_EQ(c.status()["succeededWorkers"], 2);
  EXPECT_EQ(c.status()["activeWorkers"], 0);
  EXPECT_EQ(c.status()["completionTime"], "2027-01-15T08:00:04Z");
  EXPECT_EQ(Condition(c.status(), "Succeeded")["status"], "True");
  EXPECT_EQ(Condition(c.status(), "Running")["status"], "False");
  ASSERT_NE(FindEvent(done, "AllWorkersSucceeded"), nullptr);
  // Finished: nothing more happens, and nothing is recreated.
  const ReconcileResult after = c.Step(kT0 + 100);
  EXPECT_EQ(CountKind(after, Action::Kind::kCreate), 0);
  EXPECT_FALSE(after.status);
}

TEST(Reconcile, MissingPodWhilePendingIsRecreatedNotAFailure) {
  FakeCluster c(MinimalJob(2));
  c.Step(kT0);
  c.RemovePod("j-worker-1");
  const ReconcileResult r = c.Step(kT0 + 1);
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Pod"), std::vector<std::string>{"j-worker-1"});
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(c.status()["epoch"], 1);
}

// --- failures ------------------------------------------------------------------------------

TEST(Reconcile, FailureRestartsAsANewEpochAfterOldPodsAreGone) {
  FakeCluster c = RunningJob(MinimalJob(2));
  c.set_graceful_deletes(true);
  c.SetTrainerExit("j-worker-1", 1, "Error");
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(c.status()["restartCount"], 1);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "ConfigMap"), std::vector<std::string>{"j-world"});
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate), 0);
  const Action* event = FindEvent(r, "WorkerFailed");
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->event_type, "Warning");
  EXPECT_NE(event->message.find("j-worker-1"), std::string::npos) << event->message;
  EXPECT_NE(event->message.find("\"trainer\" exited with code 1 (Error)"), std::string::npos)
      << event->message;
  EXPECT_EQ(Condition(c.status(), "Restarting")["status"], "True");
  EXPECT_EQ(Condition(c.status(), "Running")["status"], "False");

  // Old pods still terminating: no new pod may appear yet.
  const ReconcileResult waiting = c.Step(kT0 + 21);
  EXPECT_EQ(CountKind(waiting, Action::Kind::kCreate, "Pod"), 0);
  EXPECT_EQ(CountKind(waiting, Action::Kind::kDelete), 0);

  c.FinishTerminations();
  const ReconcileResult fresh = c.Step(kT0 + 22);
  EXPECT_EQ(Names(fresh, Action::Kind::kCreate, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  for (const Action& a : fresh.actions) {
    if (KindOf(a) == "Pod") {
      EXPECT_EQ(Epoch(a.object), "2");
    }
    if (KindOf(a) == "ConfigMap") {
      EXPECT_EQ(a.object["data"]["epoch"], "2");
    }
  }
  EXPECT_EQ(Names(fresh, Action::Kind::kCreate, "ConfigMap"), std::vector<std::string>{"j-world"});
  EXPECT_EQ(c.status()["startTime"], "2027-01-15T08:00:00Z");  // kept across restarts

  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 30);
  EXPECT_EQ(Phase(c), "Running");
  EXPECT_EQ(Condition(c.status(), "Restarting")["status"], "False");
  EXPECT_EQ(Condition(c.status(), "Restarting")["reason"], "Recovered");
}

TEST(Reconcile, BackoffExhaustionFailsWithTheCause) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"backoffLimit", 1}};
  FakeCluster c = RunningJob(job);
  c.SetTrainerExit("j-worker-0", 137, "OOMKilled");
  c.Settle(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 30);
  EXPECT_EQ(Phase(c), "Running");

  c.SetTrainerExit("j-worker-1", 137, "OOMKilled");
  const ReconcileResult r = c.Step(kT0 + 40);
  EXPECT_EQ(Phase(c), "Failed");
  const json failed = Condition(c.status(), "Failed");
  EXPECT_EQ(failed["status"], "True");
  EXPECT_EQ(failed["reason"], "BackoffLimitExceeded");
  const std::string message = failed["message"];
  EXPECT_NE(message.find("j-worker-1"), std::string::npos) << message;
  EXPECT_NE(message.find("exited with code 137 (OOMKilled)"), std::string::npos) << message;
  EXPECT_EQ(c.status()["completionTime"], "2027-01-15T08:00:40Z");
  EXPECT_EQ(c.status()["failedWorkers"], 1);
  EXPECT_EQ(c.status()["restartCount"], 1);
  // cleanPodPolicy Running (the default): the still-running worker goes, the failed one stays.
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-0"});
  ASSERT_NE(FindEvent(r, "BackoffLimitExceeded"), nullptr);
}

TEST(Reconcile, PodDeletedExternallyWhileRunningRestarts) {
  FakeCluster c = RunningJob(MinimalJob(3));
  c.RemovePod("j-worker-2");
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_EQ(c.status()["epoch"], 2);
  const Action* event = FindEvent(r, "WorkerFailed");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("j-worker-2 disappeared"), std::string::npos) << event->message;
  c.Settle(kT0 + 21);
  EXPECT_EQ(c.PodNames(), (std::vector<std::string>{"j-worker-0", "j-worker-1", "j-worker-2"}));
  for (const json& p : c.pods()) EXPECT_EQ(Epoch(p), "2");
}

TEST(Reconcile, EvictedPodRestarts) {
  FakeCluster c = RunningJob(MinimalJob(2));
  c.SetPodPhase("j-worker-0", "Failed");
  c.Pod("j-worker-0")->at("status")["reason"] = "Evicted";
  const ReconcileResult r = c.Step(kT0 + 20);
  const Action* event = FindEvent(r, "WorkerFailed");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("pod phase Failed (Evicted)"), std::string::npos) << event->message;
}

TEST(Reconcile, TerminatingWorkerRestarts) {
  FakeCluster c = RunningJob(MinimalJob(2));
  c.Pod("j-worker-1")->at("metadata")["deletionTimestamp"] = "2027-01-15T08:00:15Z";
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  // Only the pod not already going away is deleted.
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-0"});
  const Action* event = FindEvent(r, "WorkerFailed");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("j-worker-1 is being deleted"), std::string::npos);
}

// --- disruptions and pods stuck terminating -----------------------------------------------

// A worker the control plane took away (DisruptionTarget=True) restarts the world without using
// up backoffLimit, as podFailurePolicy's Ignore on DisruptionTarget does for Jobs: with
// backoffLimit 0 the job goes on, and the condition and event say which pod and why.
TEST(Reconcile, DisruptedWorkerRestartsWithoutUsingBackoff) {
  for (const std::string reason : {"PreemptionByScheduler", "EvictionByEvictionAPI",
                                   "DeletionByTaintManager", "TerminationByKubelet"}) {
    SCOPED_TRACE(reason);
    json job = MinimalJob(2);
    job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
    FakeCluster c = RunningJob(job);
    c.SetDisruptionTarget("j-worker-1", reason, "taken away by the control plane");
    c.MarkTerminating("j-worker-1", kT0 + 15);
    const ReconcileResult r = c.Step(kT0 + 20);
    EXPECT_EQ(Phase(c), "Restarting");
    EXPECT_EQ(c.status()["epoch"], 2);
    EXPECT_EQ(c.status()["restartCount"], 0);
    const json restarting = Condition(c.status(), "Restarting");
    EXPECT_EQ(restarting["status"], "True");
    EXPECT_EQ(restarting["reason"], "WorkerDisrupted");
    const std::string message = restarting.value("message", "");
    EXPECT_NE(message.find("worker pod j-worker-1 was disrupted (" + reason), std::string::npos)
        << message;
    EXPECT_NE(message.find("not counted against backoffLimit"), std::string::npos) << message;
    const Action* event = FindEvent(r, "WorkerDisrupted");
    ASSERT_NE(event, nullptr);
    EXPECT_EQ(event->event_type, "Warning");
    EXPECT_EQ(event->message, message);
    EXPECT_EQ(FindEvent(r, "WorkerFailed"), nullptr);
    EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-0"});
  }
}

// The disruption is the cause even when its peers fail in the same observation (their trainers
// lose a rank), and a later failure of the worker itself still counts.
TEST(Reconcile, DisruptionWithCrashedPeersIsNotAFailureButALaterCrashIs) {
  json job = MinimalJob(3);
  job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  FakeCluster c = RunningJob(job);
  // Node-pressure eviction by the kubelet: phase Failed (Evicted) plus the condition.
  c.SetPodPhase("j-worker-2", "Failed");
  c.Pod("j-worker-2")->at("status")["reason"] = "Evicted";
  c.SetDisruptionTarget("j-worker-2", "TerminationByKubelet",
                        "The node was low on resource: memory.");
  c.SetTrainerExit("j-worker-0", 1, "Error");
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_EQ(c.status()["restartCount"], 0);
  const Action* event = FindEvent(r, "WorkerDisrupted");
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->message.rfind("worker pod j-worker-2 was disrupted (TerminationByKubelet: The "
                                 "node was low on resource: memory.)",
                                 0),
            0u)
      << event->message;
  EXPECT_NE(event->message.find("and 1 more failed workers"), std::string::npos) << event->message;

  c.Settle(kT0 + 21);
  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 30);
  ASSERT_EQ(Phase(c), "Running");
  for (const json& p : c.pods()) EXPECT_EQ(Epoch(p), "2");
  c.SetTrainerExit("j-worker-1", 137, "OOMKilled");
  c.Step(kT0 + 40);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "Failed")["reason"], "BackoffLimitExceeded");
}

// The observed state carries what the API server reports: the DisruptionTarget condition (only
// when True) and the deletionTimestamp.
TEST(WorkerPodState, ReadsDisruptionTargetAndDeletionTime) {
  json pod = json::parse(R"({
    "metadata": {"name": "j-worker-0", "deletionTimestamp": "2027-01-15T08:00:30Z",
                 "deletionGracePeriodSeconds": 30},
    "status": {"phase": "Running", "conditions": [
      {"type": "Ready", "status": "True"},
      {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
       "message": "Eviction API: evicting"}]}})");
  WorkerPodState s = ObserveWorkerPod(pod, "trainer");
  EXPECT_TRUE(s.ready);
  EXPECT_TRUE(s.terminating);
  EXPECT_EQ(s.deletion_unix, std::optional<int64_t>(kT0 + 30));
  EXPECT_TRUE(s.disrupted);
  EXPECT_EQ(s.disruption, "EvictionByEvictionAPI: Eviction API: evicting");
  pod["status"]["conditions"][1]["status"] = "False";
  pod["metadata"]["deletionTimestamp"] = "yesterday";
  s = ObserveWorkerPod(pod, "trainer");
  EXPECT_FALSE(s.disrupted);
  EXPECT_TRUE(s.terminating);
  EXPECT_FALSE(s.deletion_unix);  // never force-deleted on a time it cannot read
}

TEST(WorkerPodState, ReadsWhyAPodCannotStart) {
  json pod = json::parse(R"({
    "metadata": {"name": "j-worker-0"},
    "status": {"phase": "Pending",
      "initContainerStatuses": [
        {"name": "korovod-sidecar", "state": {"running": {}}}],
      "containerStatuses": [
        {"name": "trainer", "state": {"waiting": {"reason": "ErrImagePull",
                                                   "message": "pull access denied"}}}]}})");
  WorkerPodState s = ObserveWorkerPod(pod, "trainer");
  EXPECT_EQ(s.not_starting_reason, "ErrImagePull");
  EXPECT_EQ(s.not_starting, "container \"trainer\": ErrImagePull: pull access denied");

  // A crash-looping native sidecar (init container, restartPolicy Always) keeps the pod from
  // starting; it is named before the regular containers that wait on it.
  pod["status"]["initContainerStatuses"][0]["state"] =
      json::parse(R"({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}})");
  s = ObserveWorkerPod(pod, "trainer");
  EXPECT_EQ(s.not_starting_reason, "CrashLoopBackOff");
  EXPECT_EQ(s.not_starting, "init container \"korovod-sidecar\": CrashLoopBackOff: back-off 5m0s");

  // Reasons that pass by themselves, and CrashLoopBackOff of a regular container, are not.
  pod["status"].erase("initContainerStatuses");
  pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "ContainerCreating";
  EXPECT_EQ(ObserveWorkerPod(pod, "trainer").not_starting, "");
  pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] = "CrashLoopBackOff";
  EXPECT_EQ(ObserveWorkerPod(pod, "trainer").not_starting, "");

  pod["status"]["conditions"] = json::parse(R"([{"type": "PodScheduled", "status": "False",
      "reason": "Unschedulable",
      "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])");
  s = ObserveWorkerPod(pod, "trainer");
  EXPECT_EQ(s.not_starting_reason, "Unschedulable");
  EXPECT_EQ(s.not_starting,
            "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");

  // A pod going away is no longer reported as not starting.
  pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:30Z";
  EXPECT_EQ(ObserveWorkerPod(pod, "trainer").not_starting, "");
}

// A worker that cannot start is named in WorkersNotStarting (reason, pod, container, message)
// instead of a silent Pending; the job is not failed for it, and the condition clears once every
// worker runs.
TEST(Reconcile, WorkerThatCannotStartIsNamedUntilEveryWorkerRuns) {
  FakeCluster c(MinimalJob(2));
  c.Step(kT0);
  EXPECT_TRUE(Condition(c.status(), "WorkersNotStarting").is_null());
  c.SetContainerWaiting("j-worker-1", "trainer", "ImagePullBackOff",
                        "Back-off pulling image \"t\"");
  const ReconcileResult r = c.Step(kT0 + 1);
  EXPECT_EQ(Phase(c), "Pending");
  json cond = Condition(c.status(), "WorkersNotStarting");
  EXPECT_EQ(cond["status"], "True");
  EXPECT_EQ(cond["reason"], "ImagePullBackOff");
  EXPECT_EQ(cond["message"],
            "worker pod j-worker-1 cannot start: container \"trainer\": ImagePullBackOff: "
            "Back-off pulling image \"t\"");
  const Action* event = FindEvent(r, "WorkersNotStarting");
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->event_type, "Warning");
  EXPECT_EQ(event->message, cond["message"]);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate), 0);
  EXPECT_TRUE(Condition(c.status(), "Failed").is_null());

  // Still stuck, and another pod unschedulable: no second event, both counted.
  c.SetUnschedulable("j-worker-0", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");
  const ReconcileResult again = c.Step(kT0 + 2);
  EXPECT_EQ(FindEvent(again, "WorkersNotStarting"), nullptr);
  cond = Condition(c.status(), "WorkersNotStarting");
  EXPECT_EQ(cond["reason"], "Unschedulable");
  EXPECT_EQ(cond["message"],
            "worker pod j-worker-0 cannot start: Unschedulable: 0/3 nodes are available: 3 "
            "Insufficient nvidia.com/gpu. (and 1 more worker pods)");
  EXPECT_EQ(cond["lastTransitionTime"], "2027-01-15T08:00:01Z");

  // The image appears, the node is added: once every worker runs the condition clears.
  c.SetContainerWaiting("j-worker-1", "trainer", "", "");
  c.SetPodReady("j-worker-0", false);  // drops the PodScheduled=False condition
  c.SetPodPhase("j-worker-0", "Pending");
  c.Step(kT0 + 3);
  EXPECT_EQ(Condition(c.status(), "WorkersNotStarting")["status"], "True");  // not yet running
  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 4);
  EXPECT_EQ(Phase(c), "Running");
  cond = Condition(c.status(), "WorkersNotStarting");
  EXPECT_EQ(cond["status"], "False");
  EXPECT_EQ(cond["reason"], "AllWorkersRunning");
  EXPECT_EQ(c.status()["restartCount"], 0);
}

// A crash-looping sidecar is reported too; the active deadline, not the report, ends the job.
TEST(Reconcile, CrashLoopingSidecarIsReportedAndTheDeadlineDecides) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 100}};
  FakeCluster c(job);
  c.Step(kT0);
  c.SetContainerWaiting("j-worker-0", "korovod-sidecar", "CrashLoopBackOff",
                        "back-off 40s restarting failed container", /*init=*/true);
  c.Step(kT0 + 50);
  EXPECT_EQ(Phase(c), "Pending");
  json cond = Condition(c.status(), "WorkersNotStarting");
  EXPECT_EQ(cond["status"], "True");
  EXPECT_EQ(cond["reason"], "CrashLoopBackOff");
  EXPECT_NE(cond["message"].get<std::string>().find(
                "worker pod j-worker-0 cannot start: init container \"korovod-sidecar\""),
            std::string::npos)
      << cond;
  c.Step(kT0 + 100);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "Failed")["reason"], "DeadlineExceeded");
  EXPECT_EQ(Condition(c.status(), "WorkersNotStarting")["status"], "False");
}

// A pod whose node is lost stays Terminating after its eviction: no kubelet confirms it. Once
// its grace period is over by a margin it is deleted with gracePeriodSeconds 0, and the next
// epoch starts instead of waiting for it (or for the active deadline).
TEST(Reconcile, PodStuckTerminatingIsForceDeletedAndTheNextEpochStarts) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 100000}};
  FakeCluster c = RunningJob(job);
  c.set_graceful_deletes(true);
  // The taint manager evicts j-worker-1 at kT0+100 with a 30 s grace: deletionTimestamp is
  // kT0+130, when the grace ends.
  c.SetDisruptionTarget("j-worker-1", "DeletionByTaintManager",
                        "Taint manager: deleting due to NoExecute taint");
  c.MarkTerminating("j-worker-1", kT0 + 100);
  ReconcileResult r = c.Step(kT0 + 101);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-0"});
  for (const Action& a : r.actions) EXPECT_FALSE(a.force);
  c.RemovePod("j-worker-0");  // its kubelet finishes; j-worker-1's never does

  // Within the grace period and the margin: wait, and come back when it runs out (a lost node
  // sends no more events).
  r = c.Step(kT0 + 102);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  EXPECT_EQ(r.requeue_after_seconds,
            std::optional<int64_t>(130 + kStuckTerminationMarginSeconds - 102));
  r = c.Step(kT0 + 130 + kStuckTerminationMarginSeconds - 1);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);

  r = c.Step(kT0 + 130 + kStuckTerminationMarginSeconds);
  ASSERT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-1"});
  for (const Action& a : r.actions) {
    if (a.kind == Action::Kind::kDelete) {
      EXPECT_TRUE(a.force);
    }
  }
  const ReconcileResult fresh = c.Step(kT0 + 131 + kStuckTerminationMarginSeconds);
  EXPECT_EQ(Names(fresh, Action::Kind::kCreate, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  for (const json& p : c.pods()) EXPECT_EQ(Epoch(p), "2");
  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 140 + kStuckTerminationMarginSeconds);
  EXPECT_EQ(Phase(c), "Running");
}

// The grace period is the pod's own: a long terminationGracePeriodSeconds is waited out.
TEST(Reconcile, TerminatingPodWithinItsLongGracePeriodIsNotForceDeleted) {
  FakeCluster c = RunningJob(MinimalJob(2));
  c.MarkTerminating("j-worker-1", kT0 + 100, /*grace_seconds=*/600);
  c.Step(kT0 + 101);
  EXPECT_EQ(Phase(c), "Restarting");
  const ReconcileResult r = c.Step(kT0 + 102);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  EXPECT_EQ(r.requeue_after_seconds,
            std::optional<int64_t>(700 + kStuckTerminationMarginSeconds - 102));
  EXPECT_EQ(CountKind(c.Step(kT0 + 699 + kStuckTerminationMarginSeconds), Action::Kind::kDelete),
            0);
  EXPECT_EQ(Names(c.Step(kT0 + 700 + kStuckTerminationMarginSeconds), Action::Kind::kDelete, "Pod"),
            std::vector<std::string>{"j-worker-1"});
}

TEST(Reconcile, ReplicasChangeStartsANewEpochWithoutCountingARestart) {
  FakeCluster c = RunningJob(MinimalJob(2));
  c.spec()["replicas"] = 3;
  c.job()["metadata"]["generation"] = 2;
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(c.status()["observedGeneration"], 2);
  EXPECT_EQ(Condition(c.status(), "Restarting")["reason"], "WorldResized");
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  c.Settle(kT0 + 21);
  EXPECT_EQ(c.PodNames(), (std::vector<std::string>{"j-worker-0", "j-worker-1", "j-worker-2"}));
  ASSERT_EQ(c.config_maps().size(), 1u);
  EXPECT_EQ(c.config_maps()[0]["data"]["size"], "3");
  EXPECT_EQ(c.config_maps()[0]["data"]["epoch"], "2");
  for (const json& p : c.pods()) {
    EXPECT_EQ(Epoch(p), "2");
  }
}

// --- suspend -------------------------------------------------------------------------------

TEST(Reconcile, SuspendDeletesPodsAndResumeStartsANewEpoch) {
  json job = MinimalJob(2);
  job["spec"]["schedulingPolicy"] = {{"gang", {{"enabled", true}, {"provider", "volcano"}}}};
  FakeCluster c = RunningJob(job);
  ASSERT_EQ(c.pod_groups().size(), 1u);
  c.spec()["runPolicy"] = {{"suspend", true}};
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "PodGroup"), std::vector<std::string>{"j"});
  for (const Action& a : r.actions) {
    if (KindOf(a) == "PodGroup") {
      EXPECT_EQ(a.object["apiVersion"], "scheduling.volcano.sh/v1beta1");
    }
  }
  EXPECT_EQ(Phase(c), "Suspended");
  EXPECT_EQ(Condition(c.status(), "Suspended")["status"], "True");
  EXPECT_FALSE(c.status().contains("startTime"));
  EXPECT_EQ(c.status()["activeWorkers"], 0);
  EXPECT_TRUE(c.pods().empty());
  const ReconcileResult quiet = c.Step(kT0 + 21);
  EXPECT_TRUE(quiet.actions.empty());

  c.spec()["runPolicy"] = {{"suspend", false}};
  const ReconcileResult resumed = c.Step(kT0 + 50);
  // The PodGroup first; the workers once it is observed (the next reconcile).
  EXPECT_EQ(Names(resumed, Action::Kind::kCreate, "PodGroup"), std::vector<std::string>{"j"});
  EXPECT_EQ(CountKind(resumed, Action::Kind::kCreate, "Pod"), 0);
  const ReconcileResult workers = c.Step(kT0 + 51);
  EXPECT_EQ(Names(workers, Action::Kind::kCreate, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(Phase(c), "Pending");
  EXPECT_EQ(c.status()["startTime"], "2027-01-15T08:00:51Z");
  EXPECT_EQ(Condition(c.status(), "Suspended")["status"], "False");
  for (const json& p : c.pods()) EXPECT_EQ(Epoch(p), "2");
}

TEST(Reconcile, CreatedSuspendedStartsNothingUntilResumed) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"suspend", true}};
  FakeCluster c(job);
  const ReconcileResult r = c.Step(kT0);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);
  EXPECT_EQ(Phase(c), "Suspended");
  c.spec()["runPolicy"]["suspend"] = false;
  c.Step(kT0 + 1);
  EXPECT_EQ(c.status()["epoch"], 1);
  EXPECT_EQ(c.pods().size(), 2u);
}

// --- deadline ------------------------------------------------------------------------------

TEST(Reconcile, ActiveDeadlineRequeuesThenFails) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 100}, {"cleanPodPolicy", "None"}};
  FakeCluster c(job);
  EXPECT_EQ(c.Step(kT0).requeue_after_seconds, 100);
  c.SetAllPodsPhase("Running");
  EXPECT_EQ(c.Step(kT0 + 60).requeue_after_seconds, 40);
  const ReconcileResult r = c.Step(kT0 + 100);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "Failed")["reason"], "DeadlineExceeded");
  // Active pods are stopped whatever the cleanPodPolicy.
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  EXPECT_FALSE(r.requeue_after_seconds);
  EXPECT_EQ(c.status()["completionTime"], "2027-01-15T08:01:40Z");
}

// --- cleanPodPolicy and TTL ----------------------------------------------------------------

struct CleanCase {
  std::string policy;
  std::vector<std::string> deleted;
};

class CleanPodPolicyTest : public ::testing::TestWithParam<CleanCase> {};

TEST_P(CleanPodPolicyTest, DeletesTheRightPodsAtTheFinish) {
  json job = MinimalJob(3);
  job["spec"]["runPolicy"] = {{"backoffLimit", 0}, {"cleanPodPolicy", GetParam().policy}};
  FakeCluster c = RunningJob(job);
  c.SetTrainerExit("j-worker-0", 0, "Completed");  // succeeded
  c.SetTrainerExit("j-worker-1", 2, "Error");      // failed; j-worker-2 still running
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), GetParam().deleted);
  const ReconcileResult again = c.Step(kT0 + 21);
  EXPECT_EQ(CountKind(again, Action::Kind::kDelete), 0);
  EXPECT_EQ(CountKind(again, Action::Kind::kCreate), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, CleanPodPolicyTest,
    ::testing::Values(CleanCase{"Running", {"j-worker-2"}},
                      CleanCase{"All", {"j-worker-0", "j-worker-1", "j-worker-2"}},
                      CleanCase{"None", {}}),
    [](const ::testing::TestParamInfo<CleanCase>& info) { return info.param.policy; });

TEST(Reconcile, TtlRequeuesThenDeletesTheJob) {
  json job = MinimalJob(1);
  job["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 60}};
  FakeCluster c(job);
  c.Step(kT0);
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  EXPECT_EQ(c.Step(kT0 + 100).requeue_after_seconds, 60);
  EXPECT_EQ(Phase(c), "Succeeded");
  EXPECT_EQ(c.Step(kT0 + 159).requeue_after_seconds, 1);
  EXPECT_FALSE(c.job_deleted());
  const ReconcileResult r = c.Step(kT0 + 160);
  ASSERT_EQ(CountKind(r, Action::Kind::kDeleteJob), 1);
  for (const Action& a : r.actions) {
    if (a.kind != Action::Kind::kDeleteJob) continue;
    EXPECT_EQ(a.object["metadata"]["uid"], "job-uid");
    EXPECT_EQ(a.object["kind"], "HorovodJob");
  }
  EXPECT_TRUE(c.job_deleted());
}

// --- a clock ahead of the one that wrote the times ---------------------------------------------

// A new leader whose clock is two hours ahead: the times in the status (written by the old
// leader) and a pod's deletionTimestamp (the API server's) look two hours old by its wall clock.
// With observed_ages (how long this operator has seen them, by its monotonic clock) nothing ends
// early: the TTL, the active deadline and the force deletion wait their full length from then.
constexpr int64_t kTwoHoursAhead = 2 * 3600;

ObservedState SkewedObserve(const FakeCluster& c, int64_t now,
                            std::map<std::string, int64_t> ages) {
  ObservedState observed = c.Observe(now);
  observed.observed_ages = std::move(ages);
  return observed;
}

TEST(Reconcile, TtlIsTimedFromWhenTheOperatorSawTheCompletionTime) {
  json job = MinimalJob(1);
  job["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 600}};
  FakeCluster c(job);
  c.Step(kT0);
  c.SetTrainerExit("j-worker-0", 0, "Completed");
  c.Step(kT0 + 100);
  ASSERT_EQ(Phase(c), "Succeeded");
  const std::string done = c.status()["completionTime"];
  const int64_t skewed_now = kT0 + 100 + kTwoHoursAhead;
  ReconcileResult r = Reconcile(SkewedObserve(c, skewed_now, {{"completionTime=" + done, 5}}));
  EXPECT_EQ(CountKind(r, Action::Kind::kDeleteJob), 0);
  EXPECT_EQ(r.requeue_after_seconds, std::optional<int64_t>(595));
  r = Reconcile(SkewedObserve(c, skewed_now + 595, {{"completionTime=" + done, 600}}));
  EXPECT_EQ(CountKind(r, Action::Kind::kDeleteJob), 1);
}

TEST(Reconcile, ActiveDeadlineIsTimedFromWhenTheOperatorSawTheStartTime) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 600}};
  FakeCluster c = RunningJob(job);
  const std::string start = c.status()["startTime"];
  ReconcileResult r =
      Reconcile(SkewedObserve(c, kT0 + 20 + kTwoHoursAhead, {{"startTime=" + start, 10}}));
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  EXPECT_FALSE(r.status && r.status->value("phase", "") == "Failed") << r.status->dump();
  EXPECT_EQ(r.requeue_after_seconds, std::optional<int64_t>(590));
  r = Reconcile(SkewedObserve(c, kT0 + 20 + kTwoHoursAhead, {{"startTime=" + start, 600}}));
  ASSERT_TRUE(r.status);
  EXPECT_EQ(r.status->value("phase", ""), "Failed") << r.status->dump();
}

TEST(Reconcile, StuckPodIsTimedFromWhenTheOperatorSawItTerminating) {
  FakeCluster c = RunningJob(MinimalJob(2));
  c.set_graceful_deletes(true);
  c.MarkTerminating("j-worker-1", kT0 + 100, /*grace_seconds=*/30);
  c.Step(kT0 + 101);
  ASSERT_EQ(Phase(c), "Restarting");
  c.RemovePod("j-worker-0");
  const json* pod = c.Pod("j-worker-1");
  ASSERT_NE(pod, nullptr);
  const std::string key = "deletionTimestamp/" + (*pod)["metadata"]["uid"].get<std::string>() +
                          "=" + (*pod)["metadata"]["deletionTimestamp"].get<std::string>();
  const int64_t skewed_now = kT0 + 102 + kTwoHoursAhead;
  ReconcileResult r = Reconcile(SkewedObserve(c, skewed_now, {{key, 1}}));
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  EXPECT_EQ(r.requeue_after_seconds,
            std::optional<int64_t>(30 + kStuckTerminationMarginSeconds - 1));
  r = Reconcile(SkewedObserve(c, skewed_now, {{key, 30 + kStuckTerminationMarginSeconds}}));
  ASSERT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-1"});
  for (const Action& a : r.actions) {
    if (a.kind == Action::Kind::kDelete) {
      EXPECT_TRUE(a.force);
    }
  }
}

// --- invalid specs and deletion ------------------------------------------------------------

TEST(Reconcile, InvalidSpecIsReportedOnceAndCreatesNothing) {
  json job = MinimalJob(2);
  job["spec"]["template"]["spec"]["containers"] =
      json::array({{{"name", "a"}, {"image", "x"}}, {{"name", "b"}, {"image", "y"}}});
  FakeCluster c(job);
  const ReconcileResult r = c.Step(kT0);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate), 0);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete), 0);
  ASSERT_EQ(CountKind(r, Action::Kind::kEvent), 1);
  EXPECT_EQ(r.actions[0].event_type, "Warning");
  EXPECT_EQ(r.actions[0].reason, "TrainerContainerNotFound");
  EXPECT_EQ(Phase(c), "Failed");
  const json valid = Condition(c.status(), "SpecValid");
  EXPECT_EQ(valid["status"], "False");
  EXPECT_EQ(valid["reason"], "TrainerContainerNotFound");
  EXPECT_NE(valid["message"].get<std::string>().find("trainer"), std::string::npos);

  const ReconcileResult again = c.Step(kT0 + 10);
  EXPECT_TRUE(again.actions.empty());
  EXPECT_FALSE(again.status);

  // Fixing the spec (a new generation) starts the job.
  c.spec()["template"]["spec"]["containers"][0]["name"] = "trainer";
  c.job()["metadata"]["generation"] = 2;
  const ReconcileResult fixed = c.Step(kT0 + 20);
  EXPECT_EQ(CountKind(fixed, Action::Kind::kCreate, "Pod"), 2);
  EXPECT_EQ(Phase(c), "Pending");
  EXPECT_EQ(Condition(c.status(), "SpecValid")["status"], "True");
  EXPECT_EQ(Condition(c.status(), "Failed")["status"], "False");
}

TEST(Reconcile, UnparsableSpecNamesTheField) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"backoffLimit", -1}};
  FakeCluster c(job);
  const ReconcileResult r = c.Step(kT0);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate), 0);
  const json valid = Condition(c.status(), "SpecValid");
  EXPECT_EQ(valid["reason"], "InvalidSpec");
  EXPECT_NE(valid["message"].get<std::string>().find("spec.runPolicy.backoffLimit"),
            std::string::npos);
}

TEST(Reconcile, GarbageDoesNotThrow) {
  for (const json& job : {json(), json(42), json::parse(R"({"metadata": 3})"),
                          json::parse(R"({"apiVersion": "korovod.dev/v1alpha1",
                                          "kind": "HorovodJob", "metadata": {"name": "x"},
                                          "spec": {"replicas": "two"}, "status": 7})")}) {
    ObservedState o;
    o.job = job;
    o.pods = {json(1), json::parse(R"({"metadata": {"labels": 5}})")};
    const ReconcileResult r = Reconcile(o);
    EXPECT_EQ(CountKind(r, Action::Kind::kCreate), 0);
  }
  // A valid job with malformed children.
  FakeCluster c(MinimalJob(2));
  ObservedState o = c.Observe(kT0);
  o.pods = {json(1), json::parse(R"({"metadata": {"name": 5, "labels": {"korovod.dev/epoch": 1}},
                                     "status": {"containerStatuses": 3}})")};
  o.config_maps = {json::parse(R"({"metadata": {"name": "j-world"}, "data": 1})")};
  EXPECT_NO_THROW(Reconcile(o));
}

TEST(Reconcile, DeletionTimestampMeansNothingToDo) {
  FakeCluster c = RunningJob();
  c.job()["metadata"]["deletionTimestamp"] = "2027-01-15T09:00:00Z";
  c.SetTrainerExit("j-worker-0", 1, "Error");
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.status);
}

TEST(Reconcile, MissingFreshKeyCreatesNoWorkers) {
  FakeCluster c(MinimalJob(2));
  ObservedState o = c.Observe(kT0);
  o.fresh_key_hex = "";
  const ReconcileResult r = Reconcile(o);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Secret"), 0);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);
  ASSERT_NE(FindEvent(r, "JobKeyUnavailable"), nullptr);
}

// The key Secret is created immutable and never updated or deleted by the operator: a restart
// (new epoch) keeps the same object, so every sidecar of every epoch reads the same key.
TEST(Reconcile, JobKeySecretIsImmutableAndKeptAcrossRestarts) {
  FakeCluster c = RunningJob(MinimalJob(2));
  ASSERT_EQ(c.secrets().size(), 1u);
  EXPECT_EQ(c.secrets()[0]["immutable"], true);
  const json uid = c.secrets()[0]["metadata"]["uid"];
  c.SetTrainerExit("j-worker-1", 1, "Error");
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete, "Secret"), 0);
  c.Settle(kT0 + 21);
  ASSERT_EQ(c.secrets().size(), 1u);
  EXPECT_EQ(c.secrets()[0]["metadata"]["uid"], uid);
}

TEST(Reconcile, GangPodGroupIsCreatedForBothProviders) {
  for (const std::string provider : {"volcano", "scheduler-plugins"}) {
    json job = MinimalJob(4);
    job["spec"]["schedulingPolicy"] = {
        {"gang", {{"enabled", true}, {"provider", provider}, {"minAvailable", 3}}}};
    FakeCluster c(job);
    const ReconcileResult r = c.Step(kT0);
    ASSERT_EQ(Names(r, Action::Kind::kCreate, "PodGroup"), std::vector<std::string>{"j"});
    for (const Action& a : r.actions) {
      if (KindOf(a) != "PodGroup") continue;
      EXPECT_EQ(a.object["apiVersion"], provider == "volcano" ? "scheduling.volcano.sh/v1beta1"
                                                              : "scheduling.x-k8s.io/v1alpha1");
      EXPECT_EQ(a.object["spec"]["minMember"], 3);
    }
    // Workers wait for the PodGroup to be observed; the reconcile asks to look again soon.
    EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);
    EXPECT_EQ(r.requeue_after_seconds, std::optional<int64_t>(1));
    const ReconcileResult next = c.Step(kT0 + 1);
    EXPECT_EQ(CountKind(next, Action::Kind::kCreate, "Pod"), 4);
    EXPECT_TRUE(c.Step(kT0 + 2).actions.empty());
  }
}

// Issue 31: a resize changes the gang's size. The PodGroup of the old size is replaced before the
// new epoch's workers are created, so the gang scheduler binds exactly the new world.
TEST(Reconcile, AResizeReplacesThePodGroupOfTheOldSize) {
  json job = MinimalJob(4);
  job["spec"]["schedulingPolicy"] = {{"gang", {{"enabled", true}, {"provider", "volcano"}}}};
  FakeCluster c = RunningJob(job);
  ASSERT_EQ(c.pod_groups().size(), 1u);
  EXPECT_EQ(c.pod_groups()[0]["spec"]["minMember"], 4);
  c.spec()["replicas"] = 3;
  c.job()["metadata"]["generation"] = 2;
  const ReconcileResult r = c.Step(kT0 + 20);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "PodGroup"), std::vector<std::string>{"j"});
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);  // not before the gang is right
  c.Settle(kT0 + 21);
  ASSERT_EQ(c.pod_groups().size(), 1u);
  EXPECT_EQ(c.pod_groups()[0]["spec"]["minMember"], 3);
  EXPECT_EQ(c.PodNames().size(), 3u);
  EXPECT_EQ(c.status()["epoch"], 2);
}

// --- the world in status, per-rank state, the start-up bound, managedBy ---------------------

// The current epoch's size lives in status.worldSize: a resize is seen even when the world
// ConfigMap (the size's old home) is missing, as it is for a reconcile after a deletion.
TEST(Reconcile, ResizeIsSeenWithoutTheWorldConfigMap) {
  FakeCluster c = RunningJob(MinimalJob(2));
  EXPECT_EQ(c.status()["worldSize"], 2);
  c.config_maps().clear();  // deleted (by a user, or between an old epoch's and a new one's)
  c.spec()["replicas"] = 3;
  c.job()["metadata"]["generation"] = 2;
  c.Step(kT0 + 20);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(c.status()["worldSize"], 3);
  EXPECT_EQ(Condition(c.status(), "Restarting")["reason"], "WorldResized");
  EXPECT_EQ(Condition(c.status(), "Restarting")["message"],
            "spec.replicas changed from 2 to 3; restarting all workers as epoch 2");
}

// A status written before worldSize existed: the size is taken from the world ConfigMap once.
TEST(Reconcile, StatusWithoutWorldSizeFallsBackToTheConfigMap) {
  FakeCluster c = RunningJob(MinimalJob(2));
  json status = c.status();
  status.erase("worldSize");
  c.job()["status"] = status;
  c.Step(kT0 + 11);
  EXPECT_EQ(c.status()["worldSize"], 2);
  EXPECT_EQ(Phase(c), "Running");
  c.spec()["replicas"] = 1;
  c.Step(kT0 + 12);
  EXPECT_EQ(c.status()["epoch"], 2);
  EXPECT_EQ(c.status()["worldSize"], 1);
}

// status.workers names every rank of the current epoch with its pod, node and state, and why a
// rank is not running.
// status.workers lists the ranks that are not Ready, with their pod and why; rankSummary has
// every rank.
TEST(Reconcile, StatusListsRanksThatAreNotReadyWithWhy) {
  FakeCluster c(MinimalJob(3));
  c.Step(kT0);
  c.SetPodPhase("j-worker-0", "Running");
  c.SetPodReady("j-worker-0", true);
  c.Pod("j-worker-0")->operator[]("spec")["nodeName"] = "node-a";
  c.SetPodPhase("j-worker-1", "Running");
  c.SetContainerWaiting("j-worker-2", "trainer", "ImagePullBackOff", "Back-off pulling image");
  c.RemovePod("j-worker-2");  // gone before it ran: Missing until recreated
  c.Step(kT0 + 1);
  const json workers = c.status()["workers"];
  ASSERT_EQ(workers.size(), 2u);  // rank 0 is Ready: only in rankSummary
  EXPECT_EQ(workers[0], json::parse(R"({"rank": 1, "pod": "j-worker-1", "state": "Running"})"));
  EXPECT_EQ(c.status()["rankSummary"], "Missing:2 Running:1 Ready:0");
  EXPECT_EQ(workers[1]["pod"], "j-worker-2");
  // Recreated in this reconcile, so observed as Missing; the next one sees it Pending.
  EXPECT_EQ(workers[1]["state"], "Missing");
  EXPECT_FALSE(c.status().contains("unlistedWorkers"));
  c.SetContainerWaiting("j-worker-2", "trainer", "ImagePullBackOff", "Back-off pulling image");
  c.Step(kT0 + 2);
  EXPECT_EQ(c.status()["workers"][1]["state"], "Pending");
  c.SetPodPhase("j-worker-1", "Pending");
  c.Step(kT0 + 3);
  EXPECT_EQ(c.status()["rankSummary"], "Pending:1-2 Ready:0");
  EXPECT_EQ(c.status()["workers"][1]["reason"], "ImagePullBackOff");
  EXPECT_EQ(c.status()["workers"][1]["message"],
            "container \"trainer\": ImagePullBackOff: Back-off pulling image");
  // Every rank Ready: no list at all.
  for (const std::string& name : c.PodNames()) {
    c.SetPodPhase(name, "Running");
    c.SetContainerWaiting(name, "trainer", "", "");
    c.SetPodReady(name, true);
  }
  c.Step(kT0 + 4);
  EXPECT_FALSE(c.status().contains("workers")) << c.status().dump();
  EXPECT_EQ(c.status()["rankSummary"], "Ready:0-2");
}

// Workers that do not all come up within startupTimeoutSeconds of their creation fail the job,
// naming the ranks that never came; the sidecars are told to wait as long.
TEST(Reconcile, WorkersThatNeverComeFailTheJobNamingTheRanks) {
  json job = MinimalJob(3);
  job["spec"]["runPolicy"] = {{"startupTimeoutSeconds", 120}};
  FakeCluster c(job);
  c.Step(kT0);
  EXPECT_EQ(c.status()["epochStartTime"], "2027-01-15T08:00:00Z");
  c.SetPodPhase("j-worker-0", "Running");
  c.SetUnschedulable("j-worker-2", "0/1 nodes are available: 1 Insufficient cpu.");
  const ReconcileResult waiting = c.Step(kT0 + 60);
  EXPECT_EQ(Phase(c), "Pending");
  EXPECT_EQ(waiting.requeue_after_seconds, std::optional<int64_t>(60));  // wakes at the bound
  EXPECT_EQ(CountKind(c.Step(kT0 + 119), Action::Kind::kDelete), 0);

  const ReconcileResult r = c.Step(kT0 + 120);
  EXPECT_EQ(Phase(c), "Failed");
  const json failed = Condition(c.status(), "Failed");
  EXPECT_EQ(failed["reason"], "StartupTimeout");
  EXPECT_EQ(failed["message"],
            "2 of 3 workers of epoch 1 did not start within "
            "spec.runPolicy.startupTimeoutSeconds (120s): rank 1 (j-worker-1: Pending); rank 2 "
            "(j-worker-2: Pending, Unschedulable: 0/1 nodes are available: 1 Insufficient "
            "cpu.)");
  // cleanPodPolicy Running: the workers still there are removed.
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1", "j-worker-2"}));
  const Action* event = FindEvent(r, "StartupTimeout");
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->event_type, "Warning");
}

// The bound counts from the epoch's pod creation: a restart's wait for the old epoch's pods to
// go (bounded by their force deletion) does not use it up, and a job that came up is never
// failed by it.
TEST(Reconcile, StartupTimeoutCountsFromTheEpochsPodsAndEndsWhenRunning) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"startupTimeoutSeconds", 30}};
  FakeCluster c = RunningJob(job);
  c.Step(kT0 + 1000);
  EXPECT_EQ(Phase(c), "Running");  // long past the bound, but it came up
  c.set_graceful_deletes(true);
  c.SetTrainerExit("j-worker-1", 1, "Error");
  c.Step(kT0 + 1001);
  EXPECT_EQ(Phase(c), "Restarting");
  EXPECT_FALSE(c.status().contains("epochStartTime"));
  c.Step(kT0 + 1040);  // old pods still terminating: no new pods, no timeout
  EXPECT_EQ(Phase(c), "Restarting");
  c.FinishTerminations();
  c.Step(kT0 + 1041);
  EXPECT_EQ(c.status()["epochStartTime"], "2027-01-15T08:17:21Z");
  c.Step(kT0 + 1070);
  EXPECT_EQ(Phase(c), "Restarting");
  c.Step(kT0 + 1071);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "Failed")["reason"], "StartupTimeout");
}

// The sidecar waits as long as the job allows, and its startup probe does not kill it sooner.
TEST(Reconcile, SidecarWaitsAsLongAsTheStartupTimeout) {
  json job = MinimalJob(1);
  job["spec"]["runPolicy"] = {{"startupTimeoutSeconds", 900}};
  FakeCluster c(job);
  c.Step(kT0);
  const json& sidecar = (*c.Pod("j-worker-0"))["spec"]["initContainers"][0];
  std::string timeout;
  for (const json& e : sidecar["env"]) {
    if (e["name"] == "KOROVOD_START_TIMEOUT_SECONDS") timeout = e["value"];
  }
  EXPECT_EQ(timeout, "900");
  const json& probe = sidecar["startupProbe"];
  EXPECT_GE(probe["periodSeconds"].get<int64_t>() * probe["failureThreshold"].get<int64_t>(), 900);
}

// managedBy naming another controller (Kueue's MultiKueue): the operator touches nothing.
TEST(Reconcile, JobManagedByAnotherControllerIsLeftAlone) {
  json job = MinimalJob(2);
  job["spec"]["runPolicy"] = {{"managedBy", "kueue.x-k8s.io/multikueue"}};
  FakeCluster c(job);
  const ReconcileResult r = c.Step(kT0);
  EXPECT_TRUE(r.actions.empty());
  EXPECT_FALSE(r.status.has_value());
  job["spec"]["runPolicy"]["managedBy"] = "korovod.dev/horovodjob-controller";
  FakeCluster ours(job);
  EXPECT_EQ(CountKind(ours.Step(kT0), Action::Kind::kCreate, "Pod"), 2);
}

// --- Kueue ------------------------------------------------------------------------------------

json QueuedJob(int replicas) {
  json job = MinimalJob(replicas);
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"}};
  return job;
}

// What Kueue's scheduler writes when it admits the Workload into flavor `flavor`.
void Admit(FakeCluster& c, const std::string& flavor) {
  json& w = c.workloads().at(0);
  w["status"]["admission"] = {
      {"clusterQueue", "cq"},
      {"podSetAssignments",
       json::array({{{"name", "worker"}, {"flavors", {{"cpu", flavor}}}, {"count", 2}}})}};
  w["status"]["conditions"] = json::array({{{"type", "QuotaReserved"},
                                            {"status", "True"},
                                            {"reason", "QuotaReserved"},
                                            {"lastTransitionTime", "2027-01-15T08:00:05Z"}},
                                           {{"type", "Admitted"},
                                            {"status", "True"},
                                            {"reason", "Admitted"},
                                            {"lastTransitionTime", "2027-01-15T08:00:05Z"}}});
}

json WorkloadCondition(const json& w, const std::string& type) {
  return Condition(w.value("status", json::object()), type);
}

// A job in a LocalQueue has no pods until Kueue admits its Workload; then its pods carry the
// flavor's node labels and tolerations; a preemption stops it (not a failure) and hands the quota
// back once its pods are gone; readmitted it runs as a new epoch; its end marks the Workload
// Finished.
TEST(Kueue, QueuedJobRunsOnlyWhileAdmittedAndGivesTheQuotaBack) {
  FakeCluster c(QueuedJob(2));
  c.resource_flavors().push_back(json::parse(R"({"metadata": {"name": "spot"},
      "spec": {"nodeLabels": {"pool": "spot"},
               "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}})"));
  ReconcileResult r = c.Step(kT0);
  ASSERT_EQ(c.workloads().size(), 1u);
  const json& w = c.workloads()[0];
  EXPECT_EQ(w["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(w["metadata"]["name"], "horovodjob-j-job-u");
  EXPECT_EQ(w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], "job-uid");
  EXPECT_EQ(w["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ(w["spec"]["queueName"], "team-a");
  EXPECT_EQ(w["spec"]["podSets"][0]["name"], "worker");
  EXPECT_EQ(w["spec"]["podSets"][0]["count"], 2);
  // The quota counts the pod as it runs: trainer and sidecar.
  EXPECT_EQ(w["spec"]["podSets"][0]["template"]["spec"]["initContainers"][0]["name"],
            "korovod-sidecar");
  EXPECT_FALSE(w["spec"].contains("priorityClassRef"));
  EXPECT_TRUE(c.pods().empty());
  EXPECT_EQ(Phase(c), "Suspended");
  EXPECT_EQ(Condition(c.status(), "Suspended")["reason"], "Queued");
  EXPECT_EQ(Condition(c.status(), "Suspended")["message"],
            "waiting for Kueue to admit Workload horovodjob-j-job-u (LocalQueue team-a)");
  EXPECT_EQ(r.requeue_after_seconds, std::optional<int64_t>(kKueueWaitPollSeconds));
  c.Step(kT0 + 1);
  EXPECT_TRUE(c.pods().empty());
  EXPECT_EQ(c.workloads().size(), 1u);  // not created twice

  Admit(c, "spot");
  r = c.Step(kT0 + 5);
  ASSERT_EQ(c.pods().size(), 2u);
  const json& pod = c.pods()[0];
  EXPECT_EQ(pod["spec"]["nodeSelector"], json::parse(R"({"pool": "spot"})"));
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "spot");
  EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], "worker");
  EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"], "horovodjob-j-job-u");
  EXPECT_EQ(Condition(c.status(), "Suspended")["status"], "False");
  EXPECT_EQ(Condition(c.status(), "Suspended")["reason"], "AdmittedByKueue");
  EXPECT_EQ(r.requeue_after_seconds, std::optional<int64_t>(kKueueRunPollSeconds));
  c.SetAllPodsPhase("Running");
  c.Step(kT0 + 6);
  EXPECT_EQ(Phase(c), "Running");
  EXPECT_TRUE(c.status_writes().empty());

  // Preempted: Kueue sets only Evicted; the operator stops the workers, then releases the quota.
  c.workloads()[0]["status"]["conditions"].push_back(
      {{"type", "Evicted"},
       {"status", "True"},
       {"reason", "Preempted"},
       {"message", "Preempted to accommodate a workload (UID: x) due to prioritization"},
       {"lastTransitionTime", "2027-01-15T08:01:00Z"}});
  c.set_graceful_deletes(true);
  r = c.Step(kT0 + 60);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1"}));
  EXPECT_EQ(Phase(c), "Suspended");
  EXPECT_EQ(Condition(c.status(), "Suspended")["reason"], "EvictedByKueue");
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_TRUE(c.status_writes().empty());  // its pods still terminate: the quota stays
  c.FinishTerminations();
  c.Step(kT0 + 61);
  ASSERT_EQ(c.status_writes().size(), 1u);
  const json& released = c.workloads()[0];
  EXPECT_FALSE(released["status"].contains("admission"));
  EXPECT_EQ(WorkloadCondition(released, "QuotaReserved")["status"], "False");
  EXPECT_EQ(WorkloadCondition(released, "QuotaReserved")["reason"], "Pending");
  EXPECT_EQ(WorkloadCondition(released, "Admitted")["status"], "False");
  EXPECT_EQ(WorkloadCondition(released, "Admitted")["reason"], "NoReservation");
  EXPECT_EQ(WorkloadCondition(released, "Requeued")["status"], "True");
  EXPECT_EQ(WorkloadCondition(released, "Requeued")["reason"], "Preempted");
  EXPECT_EQ(released["status"]["accumulatedPastExecutionTimeSeconds"], 56);  // 08:00:05-08:01:01
  c.Step(kT0 + 62);
  EXPECT_EQ(c.status_writes().size(), 1u);  // released once

  // Admitted again (Kueue turns Evicted False): a new epoch; then success marks it Finished.
  Admit(c, "spot");
  c.Step(kT0 + 70);
  ASSERT_EQ(c.pods().size(), 2u);
  EXPECT_EQ(Epoch(c.pods()[0]), "2");
  c.SetAllPodsPhase("Succeeded");
  c.Step(kT0 + 80);
  EXPECT_EQ(Phase(c), "Succeeded");
  ASSERT_EQ(c.status_writes().size(), 2u);
  EXPECT_EQ(WorkloadCondition(c.workloads()[0], "Finished")["status"], "True");
  EXPECT_EQ(WorkloadCondition(c.workloads()[0], "Finished")["reason"], "Succeeded");
  EXPECT_TRUE(c.workloads()[0]["status"].contains("admission"));  // Finished alone releases
  c.Step(kT0 + 81);
  EXPECT_EQ(c.status_writes().size(), 2u);
}

// A resize of an admitted job: the Workload's quota no longer covers the pods, so the workers
// stop, the Workload is replaced by one of the new size, and the job waits for its admission.
TEST(Kueue, ResizeReplacesTheWorkload) {
  FakeCluster c(QueuedJob(2));
  c.Step(kT0);
  Admit(c, "default");
  c.Step(kT0 + 5);
  ASSERT_EQ(c.pods().size(), 2u);
  c.spec()["replicas"] = 3;
  ReconcileResult r = c.Step(kT0 + 10);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete, "Pod"), 2);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete, "Workload"), 0);  // not while pods remain
  EXPECT_EQ(Phase(c), "Suspended");
  r = c.Step(kT0 + 11);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete, "Workload"), 1);
  c.Step(kT0 + 12);
  ASSERT_EQ(c.workloads().size(), 1u);
  EXPECT_EQ(c.workloads()[0]["spec"]["podSets"][0]["count"], 3);
  EXPECT_TRUE(c.pods().empty());
}

// The job's priority reaches its Workload as v1beta2 wants it: the reference and the value.
TEST(Kueue, WorkloadCarriesThePriority) {
  json job = QueuedJob(1);
  job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high";
  FakeCluster c(job);
  c.set_workload_priority({{"group", "kueue.x-k8s.io"},
                           {"kind", "WorkloadPriorityClass"},
                           {"name", "high"},
                           {"value", 1000}});
  c.Step(kT0);
  ASSERT_EQ(c.workloads().size(), 1u);
  EXPECT_EQ(c.workloads()[0]["spec"]["priorityClassRef"],
            json::parse(R"({"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                            "name": "high"})"));
  EXPECT_EQ(c.workloads()[0]["spec"]["priority"], 1000);
  StatusOr<HorovodJob> parsed = HorovodJobFromJson(job);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(WorkloadPriorityClassOf(*parsed)["kind"], "WorkloadPriorityClass");
}

// --- elastic jobs (spec.elastic) ------------------------------------------------------------
//
// The world follows the live pods: the operator's membership server (stood in for here by the
// ElasticServer the executor would observe) forms the epochs; the reconciler keeps the pods,
// says who is alive and reports the membership. Nothing restarts.

namespace elastic {

json ElasticJob(int replicas, int min, int backoff_limit = 6) {
  json job = MinimalJob(replicas);
  job["spec"]["elastic"] = {{"minReplicas", min}};
  job["spec"]["runPolicy"] = {{"backoffLimit", backoff_limit}};
  return job;
}

ReconcileResult Step(FakeCluster& c, int64_t now,
                     std::optional<ObservedState::ElasticServer> server,
                     const std::set<std::string>& unready = {},
                     const std::string& host = "10.0.0.9") {
  ObservedState o = c.Observe(now);
  o.settings.elastic_rendezvous_host = host;
  o.elastic_server = std::move(server);
  o.unready_nodes = unready;
  ReconcileResult r = Reconcile(o);
  c.Apply(r);
  return r;
}

ObservedState::ElasticServer Server(int64_t epoch = 0, std::vector<std::string> members = {}) {
  ObservedState::ElasticServer s;
  s.port = 7000;
  s.epoch = epoch;
  s.members = std::move(members);
  return s;
}

std::string Id(FakeCluster& c, const std::string& pod) {
  return pod + "." + c.Pod(pod)->at("metadata")["uid"].get<std::string>();
}

std::string EnvOf(const json& container, const std::string& name) {
  for (const json& e : container["env"]) {
    if (e["name"] == name) return e.value("value", "<from " + e.dump() + ">");
  }
  return "<unset>";
}

// A job whose 3 pods run and whose server formed epoch 1 with them (rank order 0, 1, 2).
FakeCluster Running(int backoff_limit = 6) {
  FakeCluster c(ElasticJob(3, 2, backoff_limit));
  Step(c, kT0, std::nullopt);
  Step(c, kT0 + 1, Server());
  c.SetAllPodsPhase("Running");
  Step(c, kT0 + 2, Server(0));
  Step(c, kT0 + 3, Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")}));
  EXPECT_EQ(Phase(c), "Running");
  return c;
}

}  // namespace elastic

TEST(ReconcileElastic, PodsWaitForTheServerThenJoinItByPodUid) {
  using namespace elastic;
  FakeCluster c(ElasticJob(3, 2));
  ReconcileResult r = Step(c, kT0, std::nullopt);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);  // no server, no port yet
  EXPECT_FALSE(r.elastic);                                   // the key Secret is on its way
  r = Step(c, kT0 + 1, std::nullopt);
  ASSERT_TRUE(r.elastic);
  EXPECT_EQ(r.elastic->job_key, testing::kTestKeyHex);
  EXPECT_EQ(r.elastic->min_workers, 2);
  EXPECT_EQ(r.elastic->max_workers, 3);
  EXPECT_EQ(r.elastic->timeout_seconds, 600);
  EXPECT_EQ(r.elastic->reset_limit, -1);
  EXPECT_TRUE(r.elastic->live.empty());
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);

  r = Step(c, kT0 + 2, Server());
  ASSERT_EQ(Names(r, Action::Kind::kCreate, "Pod"),
            (std::vector<std::string>{"j-worker-0", "j-worker-1", "j-worker-2"}));
  const json& pod = *c.Pod("j-worker-1");
  const json& sidecar = pod["spec"]["initContainers"][0];
  EXPECT_EQ(EnvOf(sidecar, "KOROVOD_ELASTIC_RENDEZVOUS"), "10.0.0.9:7000");
  EXPECT_EQ(EnvOf(sidecar, "KOROVOD_WORKER_ID"), "j-worker-1.$(KOROVOD_POD_UID)");
  EXPECT_NE(EnvOf(sidecar, "KOROVOD_POD_UID").find("metadata.uid"), std::string::npos);
  EXPECT_EQ(EnvOf(sidecar, "KOROVOD_HOST_NAME"), "j-worker-1");
  EXPECT_EQ(EnvOf(sidecar, "KOROVOD_ELASTIC_TIMEOUT_SECONDS"), "600");
  EXPECT_EQ(EnvOf(sidecar, "KOROVOD_RANK"), "<unset>");  // each epoch places it
  EXPECT_EQ(EnvOf(sidecar, "KOROVOD_COORDINATOR"), "<unset>");
  const json& trainer = pod["spec"]["containers"][0];
  EXPECT_EQ(EnvOf(trainer, "HOROVOD_ELASTIC"), "1");
  EXPECT_EQ(EnvOf(trainer, "KOROVOD_CONNECT_TIMEOUT"), "1200");  // elastic + start-up timeout
  EXPECT_EQ(EnvOf(trainer, "KOROVOD_RANK"), "<unset>");

  // Running pods are live; a pending one is not (it cannot register yet).
  c.SetPodPhase("j-worker-0", "Running");
  c.SetPodPhase("j-worker-2", "Running");
  r = Step(c, kT0 + 3, Server());
  ASSERT_TRUE(r.elastic);
  EXPECT_EQ(r.elastic->live, (std::vector<std::string>{Id(c, "j-worker-0"), Id(c, "j-worker-2")}));
  EXPECT_EQ(Phase(c), "Pending");

  r = Step(c, kT0 + 4, Server(1, {Id(c, "j-worker-2"), Id(c, "j-worker-0")}));
  EXPECT_EQ(Phase(c), "Running");
  EXPECT_EQ(c.status()["elastic"]["epoch"], 1);
  // The members as worker indices by rank, and a digest of each one's pod uid.
  EXPECT_EQ(c.status()["elastic"]["members"], "2,0");
  EXPECT_EQ(c.status()["elastic"]["memberUids"],
            UidDigest(c.Pod("j-worker-2")->at("metadata")["uid"].get<std::string>()) +
                UidDigest(c.Pod("j-worker-0")->at("metadata")["uid"].get<std::string>()));
  EXPECT_EQ(c.status()["elastic"]["rendezvousPort"], 7000);
  EXPECT_EQ(c.status()["workers"][0]["pod"], "j-worker-2");
  const Action* formed = FindEvent(r, "MembershipChanged");
  ASSERT_NE(formed, nullptr);
  EXPECT_EQ(formed->message, "membership epoch 1: 2 workers (j-worker-2, j-worker-0)");
  // A server started later (a new leader) resumes there.
  r = Step(c, kT0 + 5, Server(1, {Id(c, "j-worker-2"), Id(c, "j-worker-0")}));
  EXPECT_EQ(r.elastic->resume_epoch, 1);
  EXPECT_EQ(r.elastic->resume_members,
            (std::vector<std::string>{Id(c, "j-worker-2"), Id(c, "j-worker-0")}));
  EXPECT_EQ(r.elastic->port, 7000);
}

TEST(ReconcileElastic, AWorkerOnAnUnreadyNodeIsLostAndReplacedWithoutARestart) {
  using namespace elastic;
  FakeCluster c = Running();
  c.Pod("j-worker-1")->at("spec")["nodeName"] = "node-b";
  const std::string lost = Id(c, "j-worker-1");
  ReconcileResult r =
      Step(c, kT0 + 10, Server(1, {Id(c, "j-worker-0"), lost, Id(c, "j-worker-2")}), {"node-b"});
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-1"});
  // The replacement takes a fresh index: it never waits for the lost pod's name.
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Pod"), std::vector<std::string>{"j-worker-3"});
  const Action* event = FindEvent(r, "WorkerLost");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("j-worker-1 is on node node-b, which is not Ready"),
            std::string::npos)
      << event->message;
  ASSERT_TRUE(r.elastic);
  EXPECT_EQ(std::count(r.elastic->live.begin(), r.elastic->live.end(), lost), 0);
  EXPECT_EQ(Phase(c), "Running");
  EXPECT_EQ(c.status()["epoch"], 1);  // the pods' generation: nothing restarted
  EXPECT_EQ(c.status()["restartCount"], 0);

  // The survivors form epoch 2; the event says who left and why.
  r = Step(c, kT0 + 11, Server(2, {Id(c, "j-worker-0"), Id(c, "j-worker-2")}));
  const Action* formed = FindEvent(r, "MembershipChanged");
  ASSERT_NE(formed, nullptr);
  EXPECT_NE(formed->message.find("membership epoch 2: 2 workers (j-worker-0, j-worker-2); left: "
                                 "worker pod j-worker-1"),
            std::string::npos)
      << formed->message;
  EXPECT_EQ(c.status()["elastic"]["resets"], 0);  // the fake server counts none
}

TEST(ReconcileElastic, DeletedEvictedAndDisruptedWorkersAreNotFailuresButCrashesAre) {
  using namespace elastic;
  FakeCluster c = Running(/*backoff_limit=*/1);
  const ObservedState::ElasticServer server =
      Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")});
  // Evicted: DisruptionTarget, then its containers stop with an error while it terminates.
  c.SetDisruptionTarget("j-worker-1", "EvictionByEvictionAPI", "Eviction API: evicting");
  c.MarkTerminating("j-worker-1", kT0 + 10);
  c.SetTrainerExit("j-worker-1", 143, "Error");
  ReconcileResult r = Step(c, kT0 + 10, server);
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Pod"), std::vector<std::string>{"j-worker-3"});
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(Phase(c), "Running");

  // A crash of the trainer is the job's own failure: counted, the pod kept for its logs.
  c.SetTrainerExit("j-worker-2", 1, "Error");
  r = Step(c, kT0 + 11, server);
  EXPECT_EQ(c.status()["restartCount"], 1);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{});
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Pod"), std::vector<std::string>{"j-worker-4"});
  EXPECT_EQ(Phase(c), "Running");

  // A second one exceeds backoffLimit 1.
  c.SetTrainerExit("j-worker-0", 2, "Error");
  r = Step(c, kT0 + 12, server);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "Failed")["reason"], "BackoffLimitExceeded");
  EXPECT_NE(Condition(c.status(), "Failed")["message"].get<std::string>().find(
                "2 worker pods failed, more than backoffLimit 1"),
            std::string::npos);
  EXPECT_FALSE(r.elastic);  // its server stops
}

TEST(ReconcileElastic, TheServersFailureFailsTheJob) {
  using namespace elastic;
  FakeCluster c = Running();
  ObservedState::ElasticServer s = Server(1, {Id(c, "j-worker-0")});
  s.failure = "elastic: 1 worker alive, at least 2 needed (the minimum number of workers)";
  ReconcileResult r = Step(c, kT0 + 10, s);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "Failed")["reason"], "ElasticMembershipFailed");
  EXPECT_EQ(Condition(c.status(), "Failed")["message"], s.failure);
  EXPECT_EQ(CountKind(r, Action::Kind::kDelete, "Pod"), 3);
  EXPECT_FALSE(r.elastic);
}

TEST(ReconcileElastic, AReplacementThatCannotStartIsNamed) {
  using namespace elastic;
  FakeCluster c = Running();
  // A crashed trainer's pod stays (its logs): the replacement takes index 3, above replicas.
  c.SetTrainerExit("j-worker-2", 1, "Error");
  ReconcileResult r = Step(c, kT0 + 10, Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1")}));
  ASSERT_EQ(Names(r, Action::Kind::kCreate, "Pod"), std::vector<std::string>{"j-worker-3"});
  c.SetContainerWaiting("j-worker-3", "trainer", "ImagePullBackOff", "Back-off pulling image");
  Step(c, kT0 + 11, Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1")}));
  EXPECT_EQ(Condition(c.status(), "WorkersNotStarting")["status"], "True");
  EXPECT_NE(
      Condition(c.status(), "WorkersNotStarting")["message"].get<std::string>().find("j-worker-3"),
      std::string::npos)
      << Condition(c.status(), "WorkersNotStarting").dump();
}

TEST(ReconcileElastic, AWorkerThatNeverJoinedIsDeletedAndReplaced) {
  using namespace elastic;
  FakeCluster c = Running();
  ObservedState::ElasticServer s = Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1")});
  s.lost = {Id(c, "j-worker-2")};
  ReconcileResult r = Step(c, kT0 + 10, s);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-2"});
  EXPECT_EQ(Names(r, Action::Kind::kCreate, "Pod"), std::vector<std::string>{"j-worker-3"});
  ASSERT_NE(FindEvent(r, "WorkerLost"), nullptr);
}

TEST(ReconcileElastic, SucceedsOnceAWorkerSucceededAndNoneRuns) {
  using namespace elastic;
  FakeCluster c = Running();
  const ObservedState::ElasticServer s =
      Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")});
  c.SetPodPhase("j-worker-0", "Succeeded");
  ReconcileResult r = Step(c, kT0 + 10, s);
  EXPECT_EQ(CountKind(r, Action::Kind::kCreate, "Pod"), 0);  // nobody new once one finished
  EXPECT_EQ(Phase(c), "Running");
  c.SetPodPhase("j-worker-1", "Succeeded");
  c.SetPodPhase("j-worker-2", "Succeeded");
  r = Step(c, kT0 + 11, s);
  EXPECT_EQ(Phase(c), "Succeeded");
  EXPECT_EQ(c.status()["succeededWorkers"], 3);
}

TEST(ReconcileElastic, ReplicasResizeTheWorldWithinItsBounds) {
  using namespace elastic;
  FakeCluster c = Running();
  const ObservedState::ElasticServer s =
      Server(1, {Id(c, "j-worker-0"), Id(c, "j-worker-1"), Id(c, "j-worker-2")});
  c.spec()["replicas"] = 2;
  ReconcileResult r = Step(c, kT0 + 10, s);
  EXPECT_EQ(Names(r, Action::Kind::kDelete, "Pod"), std::vector<std::string>{"j-worker-2"});
  EXPECT_EQ(c.status()["epoch"], 1);
  EXPECT_EQ(c.status()["restartCount"], 0);
  EXPECT_EQ(Phase(c), "Running");
  // maxReplicas defaults to replicas: 2 now; more is refused.
  c.spec()["elastic"]["maxReplicas"] = 3;
  c.spec()["replicas"] = 4;
  c.job()["metadata"]["generation"] = 2;
  Step(c, kT0 + 11, s);
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_EQ(Condition(c.status(), "SpecValid")["reason"], "ElasticReplicasOutOfRange");
}

TEST(ReconcileElastic, PodsOfADottedJobNameAreNamedWhole) {
  using namespace elastic;
  json job = ElasticJob(2, 1);
  job["metadata"]["name"] = "team.exp";
  FakeCluster c(job);
  Step(c, kT0, std::nullopt);
  Step(c, kT0 + 1, Server());
  c.SetAllPodsPhase("Running");
  const std::string gone = Id(c, "team.exp-worker-1");
  Step(c, kT0 + 2, Server(1, {Id(c, "team.exp-worker-0"), gone}));
  EXPECT_EQ(c.status()["elastic"]["members"], "0-1");
  c.RemovePod("team.exp-worker-1");
  const ReconcileResult r = Step(c, kT0 + 3, Server(2, {Id(c, "team.exp-worker-0")}));
  const Action* formed = FindEvent(r, "MembershipChanged");
  ASSERT_NE(formed, nullptr);
  EXPECT_NE(formed->message.find("left: worker pod team.exp-worker-1 is gone"), std::string::npos)
      << formed->message;
}

TEST(ReconcileElastic, WithoutARendezvousHostTheJobFailsNamingTheFlag) {
  using namespace elastic;
  FakeCluster c(ElasticJob(2, 1));
  Step(c, kT0, std::nullopt, {}, "");
  EXPECT_EQ(Phase(c), "Failed");
  EXPECT_NE(Condition(c.status(), "Failed")["message"].get<std::string>().find(
                "--elastic-rendezvous-host"),
            std::string::npos);
}

}  // namespace
}  // namespace korovod::k8s_operator
