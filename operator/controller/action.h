// Action and ReconcileResult: what Reconcile asks the executor to do. Creates and deletes (plus
// events and the job's own deletion), so the executor never merges or patches: a stale child is
// deleted and recreated on a later reconcile once it is gone. The one write of another's object:
// a Kueue Workload's status (kReplaceStatus).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace korovod::k8s_operator {

struct Action {
  enum class Kind { kCreate, kDelete, kEvent, kDeleteJob, kReplaceStatus };
  Kind kind = Kind::kEvent;
  // kCreate: the full object (apiVersion, kind, metadata.name/namespace/labels/ownerReferences,
  // ...). kDelete and kDeleteJob: apiVersion, kind, metadata.name, metadata.namespace,
  // metadata.uid (delete with a uid precondition). kEvent: empty. kReplaceStatus: a child as
  // observed (metadata.resourceVersion included, so a concurrent writer makes it fail and the
  // reconcile retry) with a new status, written through its /status subresource: only for a
  // Kueue Workload, whose status the job controller shares with Kueue.
  nlohmann::json object;
  std::string event_type;  // kEvent: "Normal" | "Warning"
  // kEvent: the event reason (CamelCase) and message. kDeleteJob: reason TTLExpired and a
  // message. kCreate/kDelete: reason is a short why, for logs ("worker 3 of epoch 2"); message
  // is empty.
  std::string reason;
  std::string message;
  // kDelete of a pod: delete at once (gracePeriodSeconds 0) instead of gracefully. Only for a pod
  // already terminating past its grace period (its kubelet is gone or stuck), which would
  // otherwise keep the next epoch from starting.
  bool force = false;
};

// What an elastic job needs of its membership server (manager/elastic_servers.h): run one with
// these settings (a new one starts where status.elastic left off) and these live workers.
struct ElasticDirective {
  std::string job_key;
  int64_t min_workers = 1;
  int64_t max_workers = 0;
  int64_t timeout_seconds = 600;
  int64_t reset_limit = -1;  // -1: none
  std::vector<std::string> live;  // worker ids ("<pod>.<uid>") of the pods alive now
  // For a server started now (after an operator restart or a new leader).
  int port = 0;  // 0: any
  int64_t resume_epoch = 0;
  std::vector<std::string> resume_members;
  int64_t resume_resets = 0;
  uint64_t resume_version = 0;
};

struct ReconcileResult {
  std::vector<Action> actions;
  // Set for an elastic job that runs; unset: the job needs no membership server (any is stopped).
  std::optional<ElasticDirective> elastic;
  // The full new .status to write through /status when it differs from the observed one.
  std::optional<nlohmann::json> status;
  // Reconcile again after this many seconds (active deadline, TTL) even without a watch event.
  std::optional<int64_t> requeue_after_seconds;
};

}  // namespace korovod::k8s_operator
