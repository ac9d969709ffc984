// Reconcile: the HorovodJob controller as a pure function from the observed state (the job, its
// children, the time) to the actions that move the cluster toward the spec and the new status.
// No I/O, no clock, no randomness: the executor (operator/kube) supplies and applies them.
// README.md in this folder states every rule.
#pragma once

#include <cstdint>

#include "operator/controller/action.h"
#include "operator/controller/observed_state.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

// A pod still terminating this long after its deletionTimestamp (the end of its grace period) is
// force-deleted (gracePeriodSeconds 0): its kubelet is gone (a lost or partitioned node) or
// stuck, nothing else removes it, and the next epoch waits for it. The margin leaves a healthy
// kubelet time to kill the containers and confirm, and absorbs clock skew with the API server.
inline constexpr int64_t kStuckTerminationMarginSeconds = 60;

// How soon a job in a Kueue LocalQueue is looked at again while it waits for admission, and while
// it runs (an eviction): the operator does not watch Workloads.
inline constexpr int64_t kKueueWaitPollSeconds = 2;
inline constexpr int64_t kKueueRunPollSeconds = 5;

ReconcileResult Reconcile(const ObservedState& observed);

}  // namespace korovod::k8s_operator
