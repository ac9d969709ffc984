// ActionExecutor: applies the reconciler's actions to the API server. Creates and deletes are
// idempotent, so a reconcile that runs on a stale cache (or after an operator restart) converges
// instead of duplicating: AlreadyExists counts as created, NotFound as deleted, and every delete
// carries a uid precondition so a same-named newer object is never removed by mistake.
//
// ExecuteAll creates a run of pods in slow-start batches, as the Job and ReplicaSet controllers
// do: 1, then 2, 4, ... up to kMaxParallelPodCreates at once. One pod at a time, a 1000-worker job
// waits for 1000 round trips; all at once, a failing admission webhook or quota would be asked
// 1000 times. A batch with a failure ends the run; its remaining pods are left to the next
// reconcile (the failure re-queues it with backoff).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

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

  static constexpr int kMaxParallelPodCreates = 16;

  // `job` is the HorovodJob the action is for (the involved object of events). Fails without a
  // request when the fence says this replica no longer leads.
  Status Execute(const nlohmann::json& job, const Action& action) const;
  // OK while the fence allows writes; otherwise an error naming the lost lease. For the writes
  // that do not go through Execute (the job's status).
  Status CheckMayWrite() const;

  // Applies `actions` in order (a run of pod creates in batches, above). A failed create also
  // records a FailedCreate event on the job. `applied` (may be null) is called after each
  // action that succeeded, on the thread that applied it. Returns the first error.
  Status ExecuteAll(const nlohmann::json& job, const std::vector<Action>& actions,
                    const std::function<void(const Action&)>& applied) const;

 private:
  // Execute, then the FailedCreate event of a failed create, then `applied` on success.
  Status ExecuteOne(const nlohmann::json& job, const Action& action,
                    const std::function<void(const Action&)>& applied) const;
  // Creates the pods of actions[begin, end) in slow-start batches; the first error.
  Status CreatePodsInBatches(const nlohmann::json& job, const std::vector<Action>& actions,
                             size_t begin, size_t end,
                             const std::function<void(const Action&)>& applied) const;

  const kube::ApiClient& client_;
  const kube::EventRecorder& events_;
  OperatorMetrics& metrics_;
  const WriteFence may_write_;
};

}  // namespace korovod::k8s_operator
