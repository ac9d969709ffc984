// ActionExecutor: applies the reconciler's actions to the API server. Creates and deletes are
// idempotent, so a reconcile that runs on a stale cache (or after an operator restart) converges
// instead of duplicating: AlreadyExists counts as created, NotFound as deleted, and every delete
// carries a uid precondition so a same-named newer object is never removed by mistake.
#pragma once

#include <nlohmann/json.hpp>

#include "operator/controller/action.h"
#include "operator/kube/api_client.h"
#include "operator/kube/event_recorder.h"
#include "operator/manager/operator_metrics.h"

namespace korovod::k8s_operator {

class ActionExecutor {
 public:
  ActionExecutor(const kube::ApiClient& client, const kube::EventRecorder& events,
                 OperatorMetrics& metrics)
      : client_(client), events_(events), metrics_(metrics) {}

  // `job` is the HorovodJob the action is for (the involved object of events).
  Status Execute(const nlohmann::json& job, const Action& action) const;

 private:
  const kube::ApiClient& client_;
  const kube::EventRecorder& events_;
  OperatorMetrics& metrics_;
};

}  // namespace korovod::k8s_operator
