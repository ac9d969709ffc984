// What the operator's informers keep of each object (kube::InformerOptions::transform, applied
// at ingest): only the fields the reconciler (operator/controller/) and JobController read, so
// that the caches' memory follows the job count, not the size of the objects other controllers
// and kubelets write. managedFields is dropped by the informer itself for every kind.
//
// A field the reconciler starts to read must be kept here too: cache_trim_test pins each kind's
// kept shape and runs a worker's pod state through the trim (what ObserveWorkerPod reads).
#pragma once

#include <nlohmann/json.hpp>

namespace korovod::k8s_operator {

// Worker pods: metadata without annotations (name, namespace, uid, resourceVersion, labels,
// ownerReferences, deletionTimestamp, creationTimestamp), spec.nodeName only, and status whole
// (phase, reason, message, conditions, container statuses with their states and exit codes).
// The pod's spec (containers, env, volumes: most of its bytes) is the operator's own template.
void TrimPod(nlohmann::json& pod);

// Nodes: metadata.name and resourceVersion, and the Ready condition's type and status (the
// reconciler asks only "is this node Ready"). A Node's images, addresses, capacity and
// heartbeats (most of its 10+ KB) go.
void TrimNode(nlohmann::json& node);

// HorovodJobs: whole, but the last-applied-configuration annotation kubectl writes (a second copy
// of the spec).
void TrimJob(nlohmann::json& job);

}  // namespace korovod::k8s_operator
