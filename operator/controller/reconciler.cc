#include "operator/controller/reconciler.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/base64.h"
#include "common/rfc3339.h"
#include "operator/api/conditions.h"
#include "operator/api/json.h"
#include "operator/api/validate.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"
#include "operator/controller/elastic_members.h"
#include "operator/controller/job_key_secret.h"
#include "operator/controller/job_reconciler.h"
#include "operator/controller/json_access.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/network_policy.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/reasons.h"
#include "operator/controller/worker_pod_builder.h"
#include "operator/controller/worker_pod_state.h"
#include "operator/controller/worker_status.h"
#include "operator/controller/world_config_map.h"
#include "operator/controller/world_service.h"

namespace korovod::k8s_operator {
namespace internal {

// Seconds since the epoch of a time this reconciler wrote (startTime, completionTime), or
// nullopt when it does not parse.
std::optional<int64_t> UnixSeconds(const std::string& rfc3339) {
  const auto t = ParseRfc3339(rfc3339);
  if (!t.ok()) return std::nullopt;
  return std::chrono::floor<std::chrono::seconds>(t.value().time_since_epoch()).count();
}

std::vector<json> SortedByName(const std::vector<json>& objects) {
  std::vector<json> out = objects;
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return StringAt(a, {"metadata", "name"}) < StringAt(b, {"metadata", "name"});
  });
  return out;
}

const json* FindByName(const std::vector<json>& objects, const std::string& name) {
  for (const json& o : objects) {
    if (StringAt(o, {"metadata", "name"}) == name) return &o;
  }
  return nullptr;
}

bool Terminating(const json& object) { return Has(object, {"metadata", "deletionTimestamp"}); }

// The reference a kDelete carries. List items may lack apiVersion/kind, so the caller names them.
json DeleteReference(const json& child, std::string_view api_version, std::string_view kind,
                     const std::string& namespace_name) {
  std::string av = StringAt(child, {"apiVersion"});
  std::string k = StringAt(child, {"kind"});
  std::string ns = StringAt(child, {"metadata", "namespace"});
  return json{{"apiVersion", av.empty() ? std::string(api_version) : av},
              {"kind", k.empty() ? std::string(kind) : k},
              {"metadata",
               {{"name", StringAt(child, {"metadata", "name"})},
                {"namespace", ns.empty() ? namespace_name : ns},
                {"uid", StringAt(child, {"metadata", "uid"})}}}};
}

std::chrono::system_clock::time_point TimePoint(int64_t unix_seconds) {
  return std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds));
}

// Writes the status only when it differs from what the API server holds.
void SetStatusIfChanged(const json& job, const HorovodJobStatus& status, ReconcileResult& out) {
  json next = ToJson(status);
  const json* current = FindPath(job, {"status"});
  if (current == nullptr || *current != next) out.status = std::move(next);
}

void Requeue(ReconcileResult& out, int64_t seconds) {
  seconds = std::max<int64_t>(seconds, 1);
  if (!out.requeue_after_seconds || *out.requeue_after_seconds > seconds) {
    out.requeue_after_seconds = seconds;
  }
}

JobReconciler::JobReconciler(const ObservedState& observed, HorovodJob job)
    : observed_(observed),
      settings_(observed.settings),
      job_(std::move(job)),
      status_(job_.status),
      now_(TimePoint(observed.now_unix)),
      generation_(job_.metadata.generation),
      finished_(FinishedRankRecord::FromStatus(status_.finished_ranks)) {
  pods_ = SortedByName(observed.pods);
  const int trainer = TrainerContainerIndex(job_.spec);
  const json& containers = job_.spec.pod_template["spec"]["containers"];
  if (trainer >= 0) trainer_container_ = StringAt(containers[trainer], {"name"});
}

ReconcileResult JobReconciler::Run() {
  status_.observed_generation = generation_;
  status_.coordinator_address = CoordinatorAddress(job_, settings_);
  const Condition* spec_valid = FindCondition(status_.conditions, kConditionSpecValid);
  if (spec_valid != nullptr && spec_valid->status == ConditionStatus::kFalse) {
    // The spec was fixed after being rejected: start over as a new job.
    status_.phase.reset();
    MarkIfPresent(kConditionFailed, false, kReasonSpecCorrected, "the spec was corrected");
  }
  Mark(kConditionSpecValid, true, kReasonValid, "the spec is valid");

  if (Finished()) {
    CleanUpFinished();
  } else {
    ReconcileActive();
  }
  if (Finished()) FinishKueueWorkload();
  status_.finished_ranks = finished_.ToStatus();
  SetStatusIfChanged(observed_.job, status_, out_);
  return std::move(out_);
}

bool JobReconciler::Finished() const {
  return status_.phase == JobPhase::kSucceeded || status_.phase == JobPhase::kFailed;
}

// Seconds this operator has observed `value` of `field` (ObservedState::observed_ages), if it
// has.
std::optional<int64_t> JobReconciler::ObservedAge(std::string_view field,
                                                  const std::string& value) const {
  const auto it = observed_.observed_ages.find(ObservedAgeKey(field, value));
  if (it == observed_.observed_ages.end()) return std::nullopt;
  return it->second;
}

// How old the time `value` (`value_unix`) of the status's `field` is: as observed by this
// operator's monotonic clock when it can be, else by its wall clock (now_unix).
int64_t JobReconciler::SecondsSince(std::string_view field, const std::string& value,
                                    int64_t value_unix) const {
  return ObservedAge(field, value).value_or(observed_.now_unix - value_unix);
}

void JobReconciler::Mark(std::string_view type, bool value, std::string_view reason,
                         const std::string& msg) {
  SetCondition(status_.conditions, type, value ? ConditionStatus::kTrue : ConditionStatus::kFalse,
               reason, msg, generation_, now_);
}

// Sets a condition False only when it exists, so a job that never restarted carries no
// Restarting condition at all.
void JobReconciler::MarkIfPresent(std::string_view type, bool value, std::string_view reason,
                                  const std::string& msg) {
  if (FindCondition(status_.conditions, type) != nullptr) Mark(type, value, reason, msg);
}

void JobReconciler::Event(std::string_view type, std::string_view reason, std::string message) {
  out_.actions.push_back(Action{Action::Kind::kEvent, json(), std::string(type),
                                std::string(reason), std::move(message)});
}

void JobReconciler::Create(json object, std::string why) {
  out_.actions.push_back(Action{Action::Kind::kCreate, std::move(object), "", std::move(why), ""});
}

void JobReconciler::Delete(const json& child, std::string_view api_version, std::string_view kind,
                           std::string why) {
  const std::string name = std::string(kind) + "/" + StringAt(child, {"metadata", "name"});
  if (Terminating(child) || !deleted_.insert(name).second) return;  // already going away
  out_.actions.push_back(
      Action{Action::Kind::kDelete,
             DeleteReference(child, api_version, kind, job_.metadata.namespace_name), "",
             std::move(why), ""});
}

void JobReconciler::DeletePod(const json& pod, std::string why) {
  if (Terminating(pod)) {
    ForceDeleteIfStuck(pod, why);
  } else {
    Delete(pod, "v1", "Pod", std::move(why));
  }
}

// A pod terminating past its grace period plus a margin has no kubelet to finish it (a lost or
// partitioned node, a stuck kubelet): nothing else removes it, a new pod cannot take its name,
// and the next epoch waits for it. It is deleted with grace period 0. Until it is due, look
// again then: a lost node sends no more events. (On a partitioned node its containers may still
// run; the Job controller, which replaces terminating pods at once, takes the same risk.)
void JobReconciler::ForceDeleteIfStuck(const json& pod, const std::string& why) {
  const WorkerPodState s = ObserveWorkerPod(pod, trainer_container_);
  if (!s.deletion_unix) return;  // no time to go by: never force on a guess
  // deletionTimestamp is the API server's clock: timed from when this operator first saw the
  // pod terminating when it can be (observed_ages), so a clock ahead forces nothing early.
  int64_t past_grace = observed_.now_unix - *s.deletion_unix;
  if (const auto seen = ObservedAge("deletionTimestamp/" + s.uid,
                                    StringAt(pod, {"metadata", "deletionTimestamp"}))) {
    past_grace = *seen - IntAt(pod, {"metadata", "deletionGracePeriodSeconds"}).value_or(0);
  }
  if (past_grace < kStuckTerminationMarginSeconds) {
    Requeue(out_, kStuckTerminationMarginSeconds - past_grace);
    return;
  }
  if (!deleted_.insert("Pod/" + s.name).second) return;
  const std::string stuck =
      "worker pod " + s.name + " was still terminating " + std::to_string(past_grace) +
      "s after its grace period ended (its node is lost or its kubelet stuck); deleted it with "
      "gracePeriodSeconds 0";
  Action action{Action::Kind::kDelete,
                DeleteReference(pod, "v1", "Pod", job_.metadata.namespace_name), "",
                why + "; force: terminating past its grace period", ""};
  action.force = true;
  out_.actions.push_back(std::move(action));
  Event(kEventWarning, kReasonTerminatingPodForceDeleted, stuck);
}

void JobReconciler::EnsureSharedChildren() {
  if (FindByName(observed_.services, ServiceName(job_)) == nullptr) {
    Create(BuildWorldService(job_, settings_), "headless service for worker DNS");
  }
  if (settings_.worker_network_policy.enabled() &&
      FindByName(observed_.network_policies, WorkerNetworkPolicyName(job_)) == nullptr) {
    Create(BuildWorkerNetworkPolicy(job_, settings_), "worker network policy");
  }
  if (FindByName(observed_.secrets, JobKeySecretName(job_)) == nullptr) {
    if (IsValidJobKeyHex(observed_.fresh_key_hex)) {
      Create(BuildJobKeySecret(job_, observed_.fresh_key_hex), "job key");
    } else {
      key_ready_ = false;
      Event(kEventWarning, kReasonJobKeyUnavailable,
            "the job key Secret " + JobKeySecretName(job_) +
                " must be created but the operator supplied no valid key; workers wait");
    }
  }
}

// The job holds: no pods, no PodGroup, phase Suspended. `reason` and `message` say why: the
// user's spec.runPolicy.suspend, or Kueue (waiting for admission, or evicted).
void JobReconciler::Suspend(std::string_view reason, const std::string& message) {
  for (const json& pod : pods_) DeletePod(pod, "job suspended");
  for (const json& group : SortedByName(observed_.pod_groups)) {
    Delete(group,
           PodGroupApiVersion(
               job_.spec.scheduling_policy.gang.provider.value_or(GangProvider::kVolcano)),
           kPodGroupKind, "job suspended");
  }
  const Condition* before = FindCondition(status_.conditions, kConditionSuspended);
  if (status_.phase != JobPhase::kSuspended || before == nullptr || before->reason != reason) {
    Event(kEventNormal, reason, message);
  }
  status_.phase = JobPhase::kSuspended;
  // As for Kubernetes Jobs: the active deadline counts from the resume, not the first start.
  status_.start_time.clear();
  status_.ready_workers = status_.active_workers = 0;
  status_.succeeded_workers = status_.failed_workers = 0;
  status_.workers.clear();
  status_.unlisted_workers = 0;
  status_.rank_summary.clear();
  finished_.Clear();
  Mark(kConditionSuspended, true, reason, message);
  MarkIfPresent(kConditionRunning, false, reason, message);
  MarkIfPresent(kConditionRestarting, false, reason, message);
  MarkIfPresent(kConditionWorkersNotStarting, false, reason, message);
}

void JobReconciler::ReconcileActive() {
  EnsureSharedChildren();
  const std::string held = QueueName(job_).empty() ? "" : GateOnKueue();
  if (job_.spec.run_policy.suspend) {
    Suspend(kReasonSuspended,
            "job suspended: its worker pods are deleted until spec.runPolicy.suspend is false");
    return;
  }
  if (!held.empty()) {
    Suspend(kueue_hold_reason_, held);
    ReleaseKueueQuotaIfStopped();
    return;
  }
  if (status_.phase == JobPhase::kSuspended) {
    const std::string why = workload_ ? "admitted by Kueue (Workload " + WorkloadName(job_) + ")"
                                      : std::string("the job was resumed");
    Mark(kConditionSuspended, false, workload_ ? kReasonAdmitted : kReasonResumed, why);
    Event(kEventNormal, workload_ ? kReasonAdmitted : kReasonResumed,
          "job resumed: " + why + "; creating the worker pods");
    status_.phase = JobPhase::kPending;
    NewEpoch();
  } else if (!status_.phase) {
    status_.phase = JobPhase::kPending;
    NewEpoch();
  } else {
    PartitionPods();
  }

  if (!job_.spec.elastic) {
    MaybeResize();
    RecordOutcomes();
  }

  if (DeadlineExpired()) {
    Count();
    for (const json& pod : pods_) {
      if (ObserveWorkerPod(pod, trainer_container_).outcome == WorkerOutcome::kActive) {
        DeletePod(pod, "active deadline exceeded");
      }
    }
    Finish(JobPhase::kFailed, kReasonDeadlineExceeded,
           "the job ran longer than spec.runPolicy.activeDeadlineSeconds (" +
               std::to_string(*job_.spec.run_policy.active_deadline_seconds) + "s)");
    return;
  }

  if (job_.spec.elastic) {
    ReconcileElastic();
    return;
  }

  if (const Failure failure = FindFailure(); failure.count > 0 && !RestartAfter(failure)) return;

  for (const json* pod : stale_)
    DeletePod(*pod, "not a worker of epoch " + std::to_string(status_.epoch));
  EnsureEpochChildren();
  CreateMissingWorkers();
  Count();
  ReportWorkers();
  UpdatePhase();
  if (!Finished() && StartupTimedOut()) return;
  if (!Finished()) {
    ReportNotStarting();
    RequeueForDeadline();
  }
}

}  // namespace internal

namespace {

using internal::json;
using internal::SetStatusIfChanged;
using internal::TimePoint;

// A job whose spec cannot be run: report it once, touch nothing.
ReconcileResult ReconcileInvalid(const ObservedState& observed, std::string_view reason,
                                 const std::string& message) {
  ReconcileResult out;
  HorovodJobStatus status;
  if (const json* raw = FindPath(observed.job, {"status"}); raw != nullptr && !raw->is_null()) {
    auto parsed = HorovodJobStatusFromJson(*raw);
    if (parsed.ok()) status = *parsed;
  }
  const int64_t generation = IntAt(observed.job, {"metadata", "generation"}).value_or(0);
  const auto now = TimePoint(observed.now_unix);
  const bool changed = SetCondition(status.conditions, kConditionSpecValid, ConditionStatus::kFalse,
                                    reason, message, generation, now);
  SetCondition(status.conditions, kConditionFailed, ConditionStatus::kTrue, reason, message,
               generation, now);
  status.phase = JobPhase::kFailed;
  status.observed_generation = generation;
  if (changed) {
    out.actions.push_back(Action{Action::Kind::kEvent, json(), std::string(kEventWarning),
                                 std::string(reason), message});
  }
  SetStatusIfChanged(observed.job, status, out);
  return out;
}

// One reconcile of a valid job. Holds the observed state and accumulates actions and status.

}  // namespace

ReconcileResult Reconcile(const ObservedState& observed) {
  // Being deleted: the garbage collector removes the children through their ownerReferences.
  if (Has(observed.job, {"metadata", "deletionTimestamp"})) return ReconcileResult{};
  // Another controller (Kueue's MultiKueue) manages it: not a child, not a status field.
  const std::string managed_by = StringAt(observed.job, {"spec", "runPolicy", "managedBy"});
  if (!managed_by.empty() && managed_by != kManagedByThisOperator) return ReconcileResult{};
  auto job = HorovodJobFromJson(observed.job);
  if (!job.ok()) {
    return ReconcileInvalid(observed, kReasonInvalidSpec, job.status().message());
  }
  const Verdict verdict = Validate(job->metadata.name, job->spec);
  if (!verdict.ok()) return ReconcileInvalid(observed, verdict.reason, verdict.message);
  return internal::JobReconciler(observed, std::move(job).value()).Run();
}

}  // namespace korovod::k8s_operator
