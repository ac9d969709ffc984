// What the operator's informers keep of pods, nodes and jobs (cache_trim.h): the fields the
// reconciler reads survive, the bulk goes.
#include "operator/manager/cache_trim.h"

#include <gtest/gtest.h>

#include "operator/controller/worker_pod_state.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

json FullPod() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "j-worker-0", "namespace": "ns", "uid": "u0", "resourceVersion": "9",
                 "labels": {"korovod.dev/job-name": "j", "korovod.dev/replica-index": "0",
                            "korovod.dev/epoch": "1"},
                 "annotations": {"big": "xxxxxxxxxxxxxxxxxxxxxxxx"},
                 "ownerReferences": [{"uid": "job-uid", "controller": true, "kind": "HorovodJob",
                                      "name": "j", "apiVersion": "korovod.dev/v1alpha1"}],
                 "deletionTimestamp": "2027-01-15T08:00:00Z",
                 "creationTimestamp": "2027-01-15T07:00:00Z",
                 "managedFields": [{"manager": "kubelet"}]},
    "spec": {"nodeName": "n1", "containers": [{"name": "trainer", "image": "t",
                                               "env": [{"name": "A", "value": "1"}]}],
             "volumes": [{"name": "v"}]},
    "status": {"phase": "Failed", "reason": "Evicted", "message": "low memory",
               "conditions": [{"type": "Ready", "status": "False"},
                              {"type": "DisruptionTarget", "status": "True",
                               "reason": "PreemptionByScheduler"}],
               "containerStatuses": [{"name": "trainer", "state": {"terminated":
                                      {"exitCode": 3, "reason": "Error", "message": "boom"}}}]}
  })");
}

TEST(CacheTrim, PodKeepsWhatTheReconcilerReads) {
  json pod = FullPod();
  const WorkerPodState before = ObserveWorkerPod(pod, "trainer");
  TrimPod(pod);
  EXPECT_EQ(pod["spec"], json({{"nodeName", "n1"}}));
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
  EXPECT_FALSE(pod["metadata"].contains("managedFields"));
  for (const char* kept : {"name", "namespace", "uid", "resourceVersion", "labels",
                           "ownerReferences", "deletionTimestamp", "creationTimestamp"}) {
    EXPECT_TRUE(pod["metadata"].contains(kept)) << kept;
  }
  EXPECT_EQ(pod["status"], FullPod()["status"]);
  const WorkerPodState after = ObserveWorkerPod(pod, "trainer");
  EXPECT_EQ(after.name, before.name);
  EXPECT_EQ(after.uid, before.uid);
  EXPECT_EQ(after.index, before.index);
  EXPECT_EQ(after.epoch, before.epoch);
  EXPECT_EQ(after.terminating, before.terminating);
  EXPECT_EQ(after.outcome, before.outcome);
  EXPECT_EQ(after.cause, before.cause);
  EXPECT_EQ(after.disrupted, before.disrupted);
  EXPECT_EQ(after.disruption, before.disruption);
  EXPECT_EQ(after.cause, "container \"trainer\" exited with code 3 (Error): boom");
}

TEST(CacheTrim, NodeKeepsItsNameAndReadiness) {
  json node = json::parse(R"({
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "n1", "uid": "nu", "resourceVersion": "5", "labels": {"a": "b"},
                 "annotations": {"c": "d"}, "managedFields": [{"manager": "kubelet"}]},
    "spec": {"podCIDR": "10.0.0.0/24"},
    "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                              {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                               "lastHeartbeatTime": "2027-01-15T07:00:00Z"}],
               "images": [{"names": ["registry/image@sha256:0123"], "sizeBytes": 1}],
               "capacity": {"cpu": "8"}}
  })");
  TrimNode(node);
  EXPECT_EQ(node, json::parse(R"({
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "n1", "uid": "nu", "resourceVersion": "5"},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
  })"));
  json unreported = {{"metadata", {{"name", "n2"}}}, {"status", json::object()}};
  TrimNode(unreported);
  EXPECT_EQ(unreported, json({{"metadata", {{"name", "n2"}}}}));
}

TEST(CacheTrim, JobLosesOnlyKubectlsCopyOfItself) {
  json job = {{"metadata",
               {{"name", "j"},
                {"annotations",
                 {{"kubectl.kubernetes.io/last-applied-configuration", "{...}"}, {"mine", "x"}}}}},
              {"spec", {{"replicas", 2}}},
              {"status", {{"phase", "Running"}}}};
  TrimJob(job);
  EXPECT_EQ(job["metadata"]["annotations"], json({{"mine", "x"}}));
  EXPECT_EQ(job["spec"], json({{"replicas", 2}}));
  EXPECT_EQ(job["status"], json({{"phase", "Running"}}));
}

}  // namespace
}  // namespace korovod::k8s_operator
