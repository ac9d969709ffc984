// ActionExecutor: applies the reconciler's actions to the API server. Creates and deletes are
// idempotent, so a reconcile that runs on a stale cache (or after an operator restart) converges
// instead of duplicating: AlreadyExists counts as created, NotFound as deleted, and every delete
// carries a uid precondition so a same-named newer object is never removed by mistake.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>

#include "operator/controller/action.h"
#include "operator/kube/api_client.h"
#include "operator/kube/event_recorder.h"
#include "operator/manager/operator_metrics.h"

namespace korovod::k8s_operator {

// True while this replica may write (it holds the leader lease, or runs alone).
using WriteFence = std::function<bool()>;

class ActionExecutor {
 public:
  // `may_write` (empty: always) is asked right before every write.
  ActionExecutor(const kube::ApiClient& client, const kube::EventRecorder& events,
                 OperatorMetrics& metrics, WriteFence may_write = {})
      : client_(client), events_(events), metrics_(metrics), may_write_(std::move(may_write)) {}

  // `job` is the HorovodJob the action is for (the involved object of events). Fails without a
  // request when the fence says this replica no longer leads.
  Status Execute(const nlohmann::json& job, const Action& action) const;
  // OK while the fence allows writes; otherwise an error naming the lost lease. For the writes
  // that do not go through Execute (the job's status).
  Status CheckMayWrite() const;

 private:
  const kube::ApiClient& client_;
  const kube::EventRecorder& events_;
  OperatorMetrics& metrics_;
  const WriteFence may_write_;
};

}  // namespace korovod::k8s_operator
