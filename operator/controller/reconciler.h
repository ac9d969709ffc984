// Reconcile: the HorovodJob controller as a pure function from the observed state (the job, its
// children, the time) to the actions that move the cluster toward the spec and the new status.
// No I/O, no clock, no randomness: the executor (operator/kube) supplies and applies them.
// README.md in this folder states every rule.
#pragma once

#include "operator/controller/action.h"
#include "operator/controller/observed_state.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

ReconcileResult Reconcile(const ObservedState& observed);

}  // namespace korovod::k8s_operator
