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
#include "operator/controller/job_key_secret.h"
#include "operator/controller/json_access.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/network_policy.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/reasons.h"
#include "operator/controller/worker_pod_builder.h"
#include "operator/controller/worker_pod_state.h"
#include "operator/controller/world_config_map.h"
#include "operator/controller/world_service.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

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

// "Ready:0-2,4 Pending:3": the ranks in each state (in the states' declared order), as ranges.
std::string RankSummary(const std::vector<WorkerStatus>& workers) {
  std::string out;
  for (size_t state = 0; state < kWorkerStateNames.size(); ++state) {
    std::string ranges;
    for (size_t i = 0; i < workers.size();) {
      if (static_cast<size_t>(workers[i].state) != state) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j + 1 < workers.size() && static_cast<size_t>(workers[j + 1].state) == state &&
             workers[j + 1].rank == workers[j].rank + 1) {
        ++j;
      }
      ranges += ranges.empty() ? "" : ",";
      ranges += std::to_string(workers[i].rank);
      if (j > i) ranges += "-" + std::to_string(workers[j].rank);
      i = j + 1;
    }
    if (ranges.empty()) continue;
    out += out.empty() ? "" : " ";
    out += std::string(kWorkerStateNames[state]) + ":" + ranges;
  }
  return out;
}

// One reconcile of a valid job. Holds the observed state and accumulates actions and status.
class JobReconciler {
 public:
  JobReconciler(const ObservedState& observed, HorovodJob job)
      : observed_(observed),
        settings_(observed.settings),
        job_(std::move(job)),
        status_(job_.status),
        now_(TimePoint(observed.now_unix)),
        generation_(job_.metadata.generation) {
    pods_ = SortedByName(observed.pods);
    const int trainer = TrainerContainerIndex(job_.spec);
    const json& containers = job_.spec.pod_template["spec"]["containers"];
    if (trainer >= 0) trainer_container_ = StringAt(containers[trainer], {"name"});
  }

  ReconcileResult Run() {
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
    SetStatusIfChanged(observed_.job, status_, out_);
    return std::move(out_);
  }

 private:
  bool Finished() const {
    return status_.phase == JobPhase::kSucceeded || status_.phase == JobPhase::kFailed;
  }

  // Seconds this operator has observed `value` of `field` (ObservedState::observed_ages), if it
  // has.
  std::optional<int64_t> ObservedAge(std::string_view field, const std::string& value) const {
    const auto it = observed_.observed_ages.find(ObservedAgeKey(field, value));
    if (it == observed_.observed_ages.end()) return std::nullopt;
    return it->second;
  }
  // How old the time `value` (`value_unix`) of the status's `field` is: as observed by this
  // operator's monotonic clock when it can be, else by its wall clock (now_unix).
  int64_t SecondsSince(std::string_view field, const std::string& value, int64_t value_unix) const {
    return ObservedAge(field, value).value_or(observed_.now_unix - value_unix);
  }

  void Mark(std::string_view type, bool value, std::string_view reason, const std::string& msg) {
    SetCondition(status_.conditions, type, value ? ConditionStatus::kTrue : ConditionStatus::kFalse,
                 reason, msg, generation_, now_);
  }
  // Sets a condition False only when it exists, so a job that never restarted carries no
  // Restarting condition at all.
  void MarkIfPresent(std::string_view type, bool value, std::string_view reason,
                     const std::string& msg) {
    if (FindCondition(status_.conditions, type) != nullptr) Mark(type, value, reason, msg);
  }

  void Event(std::string_view type, std::string_view reason, std::string message) {
    out_.actions.push_back(Action{Action::Kind::kEvent, json(), std::string(type),
                                  std::string(reason), std::move(message)});
  }
  void Create(json object, std::string why) {
    out_.actions.push_back(
        Action{Action::Kind::kCreate, std::move(object), "", std::move(why), ""});
  }
  void Delete(const json& child, std::string_view api_version, std::string_view kind,
              std::string why) {
    const std::string name = std::string(kind) + "/" + StringAt(child, {"metadata", "name"});
    if (Terminating(child) || !deleted_.insert(name).second) return;  // already going away
    out_.actions.push_back(
        Action{Action::Kind::kDelete,
               DeleteReference(child, api_version, kind, job_.metadata.namespace_name), "",
               std::move(why), ""});
  }
  void DeletePod(const json& pod, std::string why) {
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
  void ForceDeleteIfStuck(const json& pod, const std::string& why) {
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

  // ---- pods of the current epoch ------------------------------------------------------------

  // Splits the observed pods into the current epoch's (by replica index) and the rest.
  void PartitionPods() {
    current_.clear();
    stale_.clear();
    for (const json& pod : pods_) {
      WorkerPodState s = ObserveWorkerPod(pod, trainer_container_);
      const bool current = status_.epoch > 0 && s.epoch == status_.epoch && s.index &&
                           *s.index < job_.spec.replicas && current_.count(*s.index) == 0;
      if (current) {
        current_.emplace(*s.index, std::make_pair(s, &pod));
      } else {
        stale_.push_back(&pod);
      }
    }
  }

  void Count() {
    status_.ready_workers = status_.active_workers = 0;
    status_.succeeded_workers = status_.failed_workers = 0;
    for (const auto& [index, entry] : current_) {
      const WorkerPodState& s = entry.first;
      if (s.ready) ++status_.ready_workers;
      switch (s.outcome) {
        case WorkerOutcome::kActive:
          ++status_.active_workers;
          break;
        case WorkerOutcome::kSucceeded:
          ++status_.succeeded_workers;
          break;
        case WorkerOutcome::kFailed:
          ++status_.failed_workers;
          break;
      }
    }
  }

  struct Failure {
    std::string cause;  // "worker pod X ...": a disrupted worker's if any, else the lowest rank's
    int count = 0;      // failed, being deleted, or (once Running) missing workers
    // A worker the control plane took away (DisruptionTarget) is among them: the restart is not
    // the job's fault and does not count against backoffLimit, as podFailurePolicy's Ignore on
    // DisruptionTarget for Jobs. Its peers failing alongside (they lose a rank) do not change
    // that.
    bool disruption = false;
  };

  Failure FindFailure() const {
    Failure f;
    std::string first, first_disrupted;
    for (int64_t i = 0; i < job_.spec.replicas; ++i) {
      auto it = current_.find(i);
      std::string why;
      bool disrupted = false;
      if (it == current_.end()) {
        // Before the world ran, a missing pod is just (re)created; once it ran, its rank is gone.
        if (status_.phase == JobPhase::kRunning) {
          why = "worker pod " + WorkerPodName(job_, i) +
                " disappeared (deleted outside the operator)";
        }
      } else {
        const WorkerPodState& s = it->second.first;
        const bool failed = s.outcome == WorkerOutcome::kFailed;
        const bool deleted = s.terminating && s.outcome == WorkerOutcome::kActive;
        if ((failed || deleted) && s.disrupted) {
          disrupted = true;
          why = "worker pod " + s.name + " was disrupted (" + s.disruption + ")";
        } else if (failed) {
          why = "worker pod " + s.name + " failed: " + s.cause;
        } else if (deleted) {
          why = "worker pod " + s.name + " is being deleted (evicted or deleted outside the " +
                "operator)";
        }
      }
      if (why.empty()) continue;
      ++f.count;
      if (first.empty()) first = why;
      if (disrupted && first_disrupted.empty()) first_disrupted = why;
    }
    f.disruption = !first_disrupted.empty();
    f.cause = f.disruption ? first_disrupted : first;
    if (f.count > 1) f.cause += " (and " + std::to_string(f.count - 1) + " more failed workers)";
    return f;
  }

  // ---- finishing ----------------------------------------------------------------------------

  void Finish(JobPhase phase, std::string_view reason, const std::string& message) {
    status_.phase = phase;
    if (status_.completion_time.empty()) status_.completion_time = FormatRfc3339(now_);
    if (phase == JobPhase::kSucceeded) {
      Mark(kConditionSucceeded, true, reason, message);
      Event(kEventNormal, reason, message);
    } else {
      Mark(kConditionFailed, true, reason, message);
      Event(kEventWarning, reason, message);
    }
    MarkIfPresent(kConditionRunning, false, reason, message);
    MarkIfPresent(kConditionRestarting, false, reason, message);
    MarkIfPresent(kConditionWorkersNotStarting, false, reason, message);
    CleanUpFinished();
  }

  // A finished job: the cleanPodPolicy, then the TTL. Counts stay as they were at the finish.
  void CleanUpFinished() {
    const CleanPodPolicy policy = job_.spec.run_policy.clean_pod_policy;
    for (const json& pod : pods_) {
      if (policy == CleanPodPolicy::kNone) break;
      const WorkerPodState s = ObserveWorkerPod(pod, trainer_container_);
      if (policy == CleanPodPolicy::kAll || s.outcome == WorkerOutcome::kActive) {
        DeletePod(pod, "job finished, cleanPodPolicy " + std::string(Name(policy)));
      }
    }
    const auto& ttl = job_.spec.run_policy.ttl_seconds_after_finished;
    if (!ttl) return;
    std::optional<int64_t> completed = UnixSeconds(status_.completion_time);
    if (!completed) {
      // Finished without a completion time (e.g. an older status): start the TTL now.
      status_.completion_time = FormatRfc3339(now_);
      completed = observed_.now_unix;
    }
    const int64_t finished_for =
        SecondsSince("completionTime", status_.completion_time, *completed);
    if (finished_for >= *ttl) {
      out_.actions.push_back(
          Action{Action::Kind::kDeleteJob,
                 json{{"apiVersion", std::string(kApiVersion)},
                      {"kind", std::string(kKind)},
                      {"metadata",
                       {{"name", job_.metadata.name},
                        {"namespace", job_.metadata.namespace_name},
                        {"uid", job_.metadata.uid}}}},
                 "", std::string(kReasonTtlExpired),
                 "ttlSecondsAfterFinished " + std::to_string(*ttl) + " expired"});
    } else {
      Requeue(out_, *ttl - finished_for);
    }
  }

  // ---- an unfinished job --------------------------------------------------------------------

  void EnsureSharedChildren() {
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
  void Suspend(std::string_view reason, const std::string& message) {
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
    status_.rank_summary.clear();
    Mark(kConditionSuspended, true, reason, message);
    MarkIfPresent(kConditionRunning, false, reason, message);
    MarkIfPresent(kConditionRestarting, false, reason, message);
    MarkIfPresent(kConditionWorkersNotStarting, false, reason, message);
  }

  // ---- Kueue (kueue_workload.h) ---------------------------------------------------------------

  // For a job in a LocalQueue: "" when its Workload is admitted (the pods then carry the
  // admitted flavors), else why the job holds, with kueue_hold_reason_ set. Creates the Workload
  // and replaces one that no longer describes the job's pods (once they are gone). A Workload
  // sends no event the operator watches, so while it matters the job is looked at again soon.
  std::string GateOnKueue() {
    const std::string queue = QueueName(job_);
    const std::string waiting =
        "waiting for Kueue to admit Workload " + WorkloadName(job_) + " (LocalQueue " + queue + ")";
    kueue_hold_reason_ = kReasonQueued;
    if (!observed_.workload) {
      Create(BuildWorkload(job_, observed_.workload_priority, settings_),
             "Kueue Workload in LocalQueue " + queue);
      Requeue(out_, kKueueWaitPollSeconds);
      return waiting;
    }
    workload_ = ObserveWorkload(*observed_.workload, job_, settings_);
    Requeue(out_, kKueueWaitPollSeconds);
    if (workload_->evicted) {
      kueue_hold_reason_ = kReasonEvictedByKueue;
      return "evicted by Kueue (" + workload_->evicted_reason + ": " + workload_->evicted_message +
             "); its workers are stopped until Kueue admits it again";
    }
    if (!workload_->matches) {
      // The spec changed (replicas, the template): the Workload's quota no longer covers the
      // pods. Stop them, then replace the Workload, which Kueue admits anew.
      if (pods_.empty()) {
        Delete(*observed_.workload, kWorkloadApiVersion, kWorkloadKind,
               "the job's spec changed; a new Workload follows");
      }
      return "the spec changed: replacing Workload " + WorkloadName(job_) +
             ", then waiting for Kueue to admit it (LocalQueue " + queue + ")";
    }
    if (!workload_->admitted) return waiting;
    std::vector<json> flavors;
    for (const std::string& name : workload_->flavors) {
      if (const json* f = FindByName(observed_.resource_flavors, name)) flavors.push_back(*f);
    }
    ApplyFlavors(job_.spec.pod_template, flavors);
    json& meta = job_.spec.pod_template["metadata"];
    if (!meta.is_object()) meta = json::object();
    if (!meta.contains("labels") || !meta["labels"].is_object()) meta["labels"] = json::object();
    if (!meta.contains("annotations") || !meta["annotations"].is_object()) {
      meta["annotations"] = json::object();
    }
    meta["labels"][std::string(kKueuePodSetLabel)] = std::string(kWorkerPodSetName);
    meta["annotations"][std::string(kKueueWorkloadAnnotation)] = WorkloadName(job_);
    out_.requeue_after_seconds.reset();
    Requeue(out_, kKueueRunPollSeconds);  // an eviction sends no event either
    return "";
  }

  // After an eviction, once no worker pod remains, the quota goes back to Kueue (and the Workload
  // back into its queue when preempted), as Kueue's jobframework does for its own job kinds.
  void ReleaseKueueQuotaIfStopped() {
    if (!workload_ || !workload_->evicted || !workload_->quota_reserved) return;
    if (!pods_.empty()) return;  // their deletions wake the next reconcile
    const bool requeue =
        workload_->evicted_reason == "Preempted" || workload_->evicted_reason == "NodeFailures";
    ReplaceWorkloadStatus(
        WorkloadWithCondition(*observed_.workload, "Requeued", requeue, workload_->evicted_reason,
                              workload_->evicted_message, observed_.now_unix,
                              /*clear_admission=*/true),
        "the job stopped after its eviction: quota released");
  }

  // A finished job's Workload is marked Finished, which releases its quota.
  void FinishKueueWorkload() {
    if (QueueName(job_).empty() || !observed_.workload) return;
    if (ObserveWorkload(*observed_.workload, job_, settings_).finished) return;
    const bool succeeded = status_.phase == JobPhase::kSucceeded;
    const Condition* c =
        FindCondition(status_.conditions, succeeded ? kConditionSucceeded : kConditionFailed);
    ReplaceWorkloadStatus(
        WorkloadWithCondition(*observed_.workload, "Finished", true,
                              succeeded ? "Succeeded" : "Failed",
                              c != nullptr ? c->message : std::string("the job finished"),
                              observed_.now_unix, /*clear_admission=*/false),
        "the job finished");
  }

  void ReplaceWorkloadStatus(json workload, std::string why) {
    workload["apiVersion"] = std::string(kWorkloadApiVersion);
    workload["kind"] = std::string(kWorkloadKind);
    out_.actions.push_back(
        Action{Action::Kind::kReplaceStatus, std::move(workload), "", std::move(why), ""});
  }

  // Starts a new epoch: every existing pod becomes stale and is deleted before the new ones
  // are created, so ranks of two epochs never meet in one world.
  void NewEpoch() {
    ++status_.epoch;
    status_.world_size = WorldSize(job_.spec);
    status_.epoch_start_time.clear();  // set when its workers are created
    PartitionPods();
  }

  bool DeadlineExpired() {
    const auto& deadline = job_.spec.run_policy.active_deadline_seconds;
    if (!deadline || status_.start_time.empty()) return false;
    std::optional<int64_t> start = UnixSeconds(status_.start_time);
    if (!start) {
      status_.start_time = FormatRfc3339(now_);
      start = observed_.now_unix;
    }
    return SecondsSince("startTime", status_.start_time, *start) >= *deadline;
  }

  void RequeueForDeadline() {
    const auto& deadline = job_.spec.run_policy.active_deadline_seconds;
    if (!deadline || status_.start_time.empty()) return;
    const std::optional<int64_t> start = UnixSeconds(status_.start_time);
    if (start) Requeue(out_, *deadline - SecondsSince("startTime", status_.start_time, *start));
  }

  void ReconcileActive() {
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

    if (!job_.spec.elastic) MaybeResize();

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

    if (const Failure failure = FindFailure(); failure.count > 0) {
      const int64_t limit = job_.spec.run_policy.backoff_limit;
      if (!failure.disruption && status_.restart_count >= limit) {
        Count();
        Finish(JobPhase::kFailed, kReasonBackoffLimitExceeded,
               failure.cause + "; backoffLimit " + std::to_string(limit) + " reached after " +
                   std::to_string(status_.restart_count) + " restarts");
        return;
      }
      if (!failure.disruption) ++status_.restart_count;
      NewEpoch();
      std::string message =
          failure.cause + "; restarting all workers as epoch " + std::to_string(status_.epoch);
      if (failure.disruption) {
        message += " (a disruption, not counted against backoffLimit: " +
                   std::to_string(status_.restart_count) + " of " + std::to_string(limit) +
                   " restarts used)";
      } else {
        message += " (restart " + std::to_string(status_.restart_count) + " of " +
                   std::to_string(limit) + ")";
      }
      const std::string_view reason =
          failure.disruption ? kReasonWorkerDisrupted : kReasonWorkerFailed;
      status_.phase = JobPhase::kRestarting;
      Mark(kConditionRestarting, true, reason, message);
      MarkIfPresent(kConditionRunning, false, reason, message);
      Event(kEventWarning, reason, message);
    }

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

  // ---- elastic jobs (spec.elastic) -----------------------------------------------------------
  //
  // The world follows the live pods: nothing restarts. The operator's membership server
  // (manager/elastic_servers.h) forms each epoch from the pods this reconcile calls live (ReconcileResult::elastic);
  // the sidecars of the survivors and newcomers join it when their trainers reset. Here: keep
  // spec.replicas pods (replacements take fresh indices, so they never wait for a lost pod's
  // name), delete pods on unready nodes and pods the server gave up on, count failed pods
  // against backoffLimit (disruptions, deletions and lost nodes are not failures), report the
  // membership. The job succeeds once a worker succeeded and none runs any more.

  static std::string WorkerId(const WorkerPodState& s) { return s.name + "." + s.uid; }

  // The pod name in a worker id ("<pod>.<uid>"; a uid has no '.', a job name may).
  static std::string PodOfId(const std::string& id) { return id.substr(0, id.rfind('.')); }

  // Why a member left the world, from its pod.
  static std::string LeaveCause(const std::string& id,
                                const std::map<std::string, std::string>& why) {
    auto it = why.find(id);
    return it != why.end() ? it->second : "worker pod " + PodOfId(id) + " is gone";
  }

  std::optional<std::string> ElasticJobKey() const {
    const json* secret = FindByName(observed_.secrets, JobKeySecretName(job_));
    if (secret == nullptr) return std::nullopt;
    auto key = Base64Decode(StringAt(*secret, {"data", std::string(kJobKeySecretKey)}));
    if (!key.ok() || key->empty()) return std::nullopt;
    return std::move(key).value();
  }

  void ReconcileElastic() {
    const ElasticSpec& spec = *job_.spec.elastic;
    const auto& server = observed_.elastic_server;
    if (settings_.elastic_rendezvous_host.empty()) {
      Finish(JobPhase::kFailed, kReasonElasticFailed,
             "spec.elastic needs the operator's membership server, and this operator runs "
             "without --elastic-rendezvous-host (the address its workers dial; the Helm chart "
             "sets it to the operator pod's IP)");
      return;
    }
    ElasticStatus& es = status_.elastic ? *status_.elastic : status_.elastic.emplace();

    // This generation's pods by index; pods of another (before a suspend) are deleted.
    std::vector<std::pair<WorkerPodState, const json*>> pods;
    std::set<std::string> names;
    for (const json& pod : pods_) {
      WorkerPodState s = ObserveWorkerPod(pod, trainer_container_);
      names.insert(s.name);
      if (status_.epoch > 0 && s.epoch == status_.epoch && s.index) {
        pods.emplace_back(std::move(s), &pod);
      } else {
        DeletePod(pod, "not a worker of generation " + std::to_string(status_.epoch));
      }
    }
    std::sort(pods.begin(), pods.end(),
              [](const auto& a, const auto& b) { return *a.first.index < *b.first.index; });

    const std::set<std::string> given_up =
        server ? std::set<std::string>(server->lost.begin(), server->lost.end())
               : std::set<std::string>();
    std::map<std::string, std::string> gone_why;  // by worker id
    std::vector<std::string> live;
    std::vector<const json*> present;  // active pods that count toward spec.replicas
    std::string first_failure, first_success;
    int64_t failures = 0, running = 0;
    status_.ready_workers = status_.active_workers = 0;
    status_.succeeded_workers = status_.failed_workers = 0;
    for (const auto& [s, pod] : pods) {
      const std::string id = WorkerId(s);
      const std::string node = StringAt(*pod, {"spec", "nodeName"});
      if (s.ready) ++status_.ready_workers;
      if (s.outcome == WorkerOutcome::kSucceeded) {
        ++status_.succeeded_workers;
        if (first_success.empty()) first_success = s.name;
        gone_why[id] = "worker pod " + s.name + " finished";
        continue;
      }
      if (s.outcome == WorkerOutcome::kFailed) {
        ++status_.failed_workers;
        if (s.disrupted) {
          gone_why[id] = "worker pod " + s.name + " was disrupted (" + s.disruption + ")";
        } else if (s.terminating) {
          gone_why[id] = "worker pod " + s.name + " was deleted";
        } else {
          // Kept (for its logs and this count): a failure of the job's own, against backoffLimit.
          ++failures;
          gone_why[id] = "worker pod " + s.name + " failed: " + s.cause;
          if (first_failure.empty()) first_failure = gone_why[id];
        }
        continue;
      }
      ++status_.active_workers;
      if (s.terminating) {
        gone_why[id] = "worker pod " + s.name +
                       (s.disrupted ? " was disrupted (" + s.disruption + ")"
                                    : std::string(" is being deleted"));
        DeletePod(*pod, "leaving the elastic world");  // forces it when stuck
        continue;
      }
      if (!node.empty() && observed_.unready_nodes.count(node) != 0) {
        gone_why[id] = "worker pod " + s.name + " is on node " + node + ", which is not Ready";
        if (deleted_.count("Pod/" + s.name) == 0) {
          Event(kEventWarning, kReasonWorkerLost,
                gone_why[id] + ": the world goes on without it and a replacement is created");
        }
        DeletePod(*pod, "its node " + node + " is not Ready");
        continue;
      }
      if (given_up.count(id) != 0) {
        gone_why[id] = "worker pod " + s.name + " did not join an epoch within " +
                       "spec.elastic.timeoutSeconds (" + std::to_string(spec.timeout_seconds) +
                       "s)";
        Event(kEventWarning, kReasonWorkerLost, gone_why[id] + ": deleted, a replacement follows");
        DeletePod(*pod, "it did not join an epoch in time");
        continue;
      }
      present.push_back(pod);
      if (s.running) {
        live.push_back(id);
        ++running;
      }
    }
    status_.restart_count = std::max(status_.restart_count, failures);

    if (server && !server->failure.empty()) {
      for (const json* pod : present) DeletePod(*pod, "the elastic job failed");
      Finish(JobPhase::kFailed, kReasonElasticFailed, server->failure);
      return;
    }
    const int64_t limit = job_.spec.run_policy.backoff_limit;
    if (failures > limit) {
      for (const json* pod : present) DeletePod(*pod, "backoffLimit exceeded");
      Finish(JobPhase::kFailed, kReasonBackoffLimitExceeded,
             first_failure + "; " + std::to_string(failures) +
                 " worker pods failed, more than backoffLimit " + std::to_string(limit) +
                 " (disrupted, deleted and lost workers are not counted)");
      return;
    }

    // The membership the server formed last.
    if (server) {
      es.rendezvous_port = server->port;
      if (server->epoch != es.epoch && server->epoch > 0) {
        std::vector<std::string> left, joined;
        for (const std::string& id : es.worker_ids) {
          if (std::find(server->members.begin(), server->members.end(), id) ==
              server->members.end()) {
            left.push_back(LeaveCause(id, gone_why));
          }
        }
        for (const std::string& id : server->members) {
          if (std::find(es.worker_ids.begin(), es.worker_ids.end(), id) == es.worker_ids.end()) {
            joined.push_back(PodOfId(id));
          }
        }
        es.epoch = server->epoch;
        es.resets = server->resets;
        es.version = static_cast<int64_t>(server->formed_version);
        es.worker_ids = server->members;
        es.world.clear();
        for (const std::string& id : es.worker_ids) es.world.push_back(PodOfId(id));
        std::string message = "membership epoch " + std::to_string(es.epoch) + ": " +
                              std::to_string(es.world.size()) + " workers";
        std::string ranks;
        for (const std::string& w : es.world) ranks += (ranks.empty() ? "" : ", ") + w;
        message += " (" + ranks + ")";
        if (!left.empty()) {
          std::string l;
          for (const std::string& x : left) l += (l.empty() ? "" : "; ") + x;
          message += "; left: " + l;
        }
        if (!joined.empty() && es.resets > 0) {  // not the first epoch
          std::string j;
          for (const std::string& x : joined) j += (j.empty() ? "" : ", ") + x;
          message += "; joined: " + j;
        }
        Event(kEventNormal, kReasonMembershipChanged, message);
      }
    }
    status_.world_size = static_cast<int64_t>(es.world.size());
    ReportElasticWorkers(es, pods);

    if (!first_success.empty()) {
      // Horovod's rule: once a worker finished, nobody new starts; done when none runs.
      if (present.empty()) {
        Finish(JobPhase::kSucceeded, kReasonAllWorkersSucceeded,
               "worker pod " + first_success + " succeeded and no worker runs any more (" +
                   std::to_string(status_.succeeded_workers) + " succeeded)");
        return;
      }
    } else if (server && key_ready_) {
      ScaleElastic(present, names);
    }

    std::optional<std::string> key = ElasticJobKey();
    if (!key) {
      Requeue(out_, 1);  // the key Secret is on its way
    } else {
      ElasticDirective d;
      d.job_key = *key;
      d.min_workers = spec.min_replicas;
      d.max_workers = MaxReplicas(spec, job_.spec.replicas);
      d.timeout_seconds = spec.timeout_seconds;
      d.reset_limit = spec.reset_limit.value_or(-1);
      d.live = live;
      std::sort(d.live.begin(), d.live.end());
      d.port = static_cast<int>(es.rendezvous_port);
      d.resume_epoch = es.epoch;
      d.resume_members = es.worker_ids;
      d.resume_resets = es.resets;
      d.resume_version = static_cast<uint64_t>(es.version);
      out_.elastic = std::move(d);
      if (!server) Requeue(out_, 1);  // its server starts after this reconcile
    }

    if (es.epoch > 0 && running >= spec.min_replicas) {
      status_.phase = JobPhase::kRunning;
      Mark(kConditionRunning, true, kReasonAllWorkersRunning,
           "membership epoch " + std::to_string(es.epoch) + " trains on " +
               std::to_string(es.world.size()) + " workers");
    }
    // WorkersNotStarting over the pods that count toward spec.replicas (a replacement's index
    // may lie above it).
    current_.clear();
    for (const auto& [s, pod] : pods) {
      if (std::find(present.begin(), present.end(), pod) != present.end()) {
        current_.emplace(*s.index, std::make_pair(s, pod));
      }
    }
    ReportNotStarting();
    RequeueForDeadline();
  }

  // Creates pods up to spec.replicas (at the lowest indices no pod object holds) or deletes the
  // highest-indexed ones down to it.
  void ScaleElastic(const std::vector<const json*>& present, const std::set<std::string>& names) {
    const int64_t want = job_.spec.replicas;
    const int64_t have = static_cast<int64_t>(present.size());
    if (have > want) {
      for (int64_t i = have - 1; i >= want; --i) {
        DeletePod(*present[static_cast<size_t>(i)],
                  "spec.replicas is " + std::to_string(want) + ": the world shrinks");
      }
      return;
    }
    if (have == want || !pod_group_ready_) return;
    const std::string endpoint = settings_.elastic_rendezvous_host + ":" +
                                 std::to_string(observed_.elastic_server->port);
    int64_t created = 0;
    for (int64_t index = 0; have + created < want; ++index) {
      if (names.count(WorkerPodName(job_, index)) != 0) continue;
      Create(BuildWorkerPod(job_, index, status_.epoch, settings_, endpoint),
             "elastic worker " + std::to_string(index));
      ++created;
    }
    if (status_.start_time.empty()) status_.start_time = FormatRfc3339(now_);
    if (status_.epoch_start_time.empty()) status_.epoch_start_time = FormatRfc3339(now_);
    const std::string message = "created " + std::to_string(created) +
                                " elastic worker pods (spec.replicas " + std::to_string(want) +
                                ", " + std::to_string(have) + " present)";
    Mark(kConditionCreated, true, kReasonWorkersCreated, message);
    Event(kEventNormal, kReasonWorkersCreated, message);
  }

  // status.workers: the members of the last membership epoch, by rank.
  void ReportElasticWorkers(const ElasticStatus& es,
                            const std::vector<std::pair<WorkerPodState, const json*>>& pods) {
    status_.workers.clear();
    for (size_t rank = 0; rank < es.worker_ids.size(); ++rank) {
      const std::string& id = es.worker_ids[rank];
      const auto it = std::find_if(pods.begin(), pods.end(),
                                   [&](const auto& p) { return WorkerId(p.first) == id; });
      status_.workers.push_back(
          it == pods.end() ? WorkerStatus{static_cast<int64_t>(rank), es.world[rank], "",
                                          WorkerState::kMissing, "", ""}
                           : StatusOf(static_cast<int64_t>(rank), it->first, *it->second));
    }
    status_.rank_summary = RankSummary(status_.workers);
  }

  static WorkerStatus StatusOf(int64_t rank, const WorkerPodState& s, const json& pod) {
    WorkerStatus w;
    w.rank = rank;
    w.pod = s.name;
    w.node = StringAt(pod, {"spec", "nodeName"});
    if (s.terminating) {
      w.state = WorkerState::kTerminating;
    } else if (s.outcome == WorkerOutcome::kSucceeded) {
      w.state = WorkerState::kSucceeded;
    } else if (s.outcome == WorkerOutcome::kFailed) {
      w.state = WorkerState::kFailed;
      w.reason = s.disrupted ? "Disrupted" : "Error";
      w.message = s.disrupted ? s.disruption : s.cause;
    } else if (s.running) {
      w.state = s.ready ? WorkerState::kReady : WorkerState::kRunning;
    } else {
      w.state = WorkerState::kPending;
      w.reason = s.not_starting_reason;
      w.message = s.not_starting;
    }
    return w;
  }

  // status.workers: one entry per rank of the current epoch, in rank order.
  void ReportWorkers() {
    status_.workers.clear();
    for (int64_t rank = 0; rank < job_.spec.replicas; ++rank) {
      WorkerStatus w;
      w.rank = rank;
      w.pod = WorkerPodName(job_, rank);
      const auto it = current_.find(rank);
      if (it == current_.end()) {
        w.state = WorkerState::kMissing;
        status_.workers.push_back(std::move(w));
        continue;
      }
      status_.workers.push_back(StatusOf(rank, it->second.first, *it->second.second));
    }
    status_.rank_summary = RankSummary(status_.workers);
  }

  // The epoch's workers must all run within spec.runPolicy.startupTimeoutSeconds of the epoch's
  // start (the sidecars' own rendezvous waits as long: BuildSidecarContainer). Past it the job
  // fails naming the ranks that never came, instead of sidecars crash-looping under a Pending
  // job for ever. Returns true when it failed the job.
  bool StartupTimedOut() {
    if (status_.phase == JobPhase::kRunning) return false;
    // Not before the epoch's workers exist: until then the old epoch's pods are going away,
    // which the force deletion of stuck ones bounds.
    if (status_.epoch_start_time.empty()) return false;
    std::optional<int64_t> start = UnixSeconds(status_.epoch_start_time);
    if (!start) {
      status_.epoch_start_time = FormatRfc3339(now_);
      start = observed_.now_unix;
    }
    const int64_t timeout = job_.spec.run_policy.startup_timeout_seconds;
    const int64_t waited = SecondsSince("epochStartTime", status_.epoch_start_time, *start);
    if (waited < timeout) {
      Requeue(out_, timeout - waited);
      return false;
    }
    std::string missing;
    int count = 0;
    for (const WorkerStatus& w : status_.workers) {
      if (w.state == WorkerState::kRunning || w.state == WorkerState::kReady ||
          w.state == WorkerState::kSucceeded) {
        continue;
      }
      ++count;
      if (count > 8) continue;  // the message stays readable; status.workers has them all
      missing += missing.empty() ? "" : "; ";
      missing += "rank " + std::to_string(w.rank) + " (" + w.pod + ": " +
                 std::string(Name(w.state)) + (w.message.empty() ? "" : ", " + w.message) + ")";
    }
    if (count == 0) return false;
    if (count > 8) missing += "; and " + std::to_string(count - 8) + " more";
    for (const json& pod : pods_) {
      if (ObserveWorkerPod(pod, trainer_container_).outcome == WorkerOutcome::kActive) {
        DeletePod(pod, "start-up timeout");
      }
    }
    Finish(JobPhase::kFailed, kReasonStartupTimeout,
           std::to_string(count) + " of " + std::to_string(job_.spec.replicas) +
               " workers of epoch " + std::to_string(status_.epoch) + " did not start within " +
               "spec.runPolicy.startupTimeoutSeconds (" + std::to_string(timeout) +
               "s): " + missing);
    return true;
  }

  // Names a current worker pod that cannot start, with the Kubernetes reason and message,
  // instead of a silent Pending. Only a report: the job is not failed for it (the image may yet
  // appear, a node may yet be added); activeDeadlineSeconds bounds the wait. The condition stays
  // True until every worker runs, so it does not flap while the kubelet alternates between
  // ErrImagePull and ImagePullBackOff or retries a pull.
  void ReportNotStarting() {
    const WorkerPodState* first = nullptr;
    int blocked = 0;
    bool all_running = static_cast<int64_t>(current_.size()) == job_.spec.replicas;
    for (const auto& [index, entry] : current_) {
      const WorkerPodState& s = entry.first;
      all_running = all_running && s.running && !s.terminating;
      if (s.not_starting.empty()) continue;
      ++blocked;
      if (first == nullptr) first = &s;
    }
    if (first != nullptr) {
      std::string message = "worker pod " + first->name + " cannot start: " + first->not_starting;
      if (blocked > 1) message += " (and " + std::to_string(blocked - 1) + " more worker pods)";
      const Condition* before = FindCondition(status_.conditions, kConditionWorkersNotStarting);
      const bool was_true = before != nullptr && before->status == ConditionStatus::kTrue;
      Mark(kConditionWorkersNotStarting, true, first->not_starting_reason, message);
      if (!was_true) Event(kEventWarning, kReasonWorkersNotStarting, message);
    } else if (all_running) {
      MarkIfPresent(kConditionWorkersNotStarting, false, kReasonAllWorkersRunning,
                    "all " + std::to_string(job_.spec.replicas) + " workers of epoch " +
                        std::to_string(status_.epoch) + " are running");
    }
  }

  // spec.replicas changed while a world runs: membership is an epoch, so the whole world starts
  // over at the new size. Not a failure: restartCount stays. The current epoch's size is in
  // status.worldSize, written with the epoch itself, so no resize is missed (a ConfigMap being
  // recreated, as the size's earlier home was, leaves a window without it). A status written
  // before worldSize existed falls back to the world ConfigMap.
  void MaybeResize() {
    int64_t size = status_.world_size;
    if (size == 0) {
      const json* cm = FindByName(observed_.config_maps, WorldConfigMapName(job_));
      if (cm == nullptr || StringAt(*cm, {"data", "epoch"}) != std::to_string(status_.epoch)) {
        return;
      }
      const std::string text = StringAt(*cm, {"data", "size"});
      size = text.empty() ? 0 : std::atoll(text.c_str());
      if (size <= 0) return;
      status_.world_size = size;
    }
    if (size == WorldSize(job_.spec)) return;
    NewEpoch();
    const std::string what = RanksPerWorker(job_.spec.worker) == 1
                                 ? "spec.replicas"
                                 : "the world (spec.replicas x spec.worker.ranksPerWorker ranks)";
    const std::string message = what + " changed from " + std::to_string(size) + " to " +
                                std::to_string(WorldSize(job_.spec)) +
                                "; restarting all workers as epoch " +
                                std::to_string(status_.epoch);
    status_.phase = JobPhase::kRestarting;
    Mark(kConditionRestarting, true, kReasonWorldResized, message);
    MarkIfPresent(kConditionRunning, false, kReasonWorldResized, message);
    Event(kEventNormal, kReasonWorldResized, message);
  }

  // The world ConfigMap and the PodGroup of the current epoch.
  void EnsureEpochChildren() {
    const std::string cm_name = WorldConfigMapName(job_);
    const json* cm = FindByName(observed_.config_maps, cm_name);
    if (cm != nullptr && StringAt(*cm, {"data", "epoch"}) != std::to_string(status_.epoch)) {
      Delete(*cm, "v1", "ConfigMap", "world of an older epoch");
    } else if (cm == nullptr) {
      Create(BuildWorldConfigMap(job_, status_.epoch, settings_),
             "world of epoch " + std::to_string(status_.epoch));
    }
    const json* group = job_.spec.scheduling_policy.gang.enabled
                            ? FindByName(observed_.pod_groups, PodGroupName(job_))
                            : nullptr;
    if (group != nullptr) {
      // A resize changes the gang's size: a PodGroup still asking for the old world's minMember
      // would never let the new epoch's pods be bound (fewer pods) or bind them early (more).
      // It is replaced: deleted now (workers wait), created afresh on the next reconcile.
      const json want = BuildPodGroup(job_);
      const json* have = FindPath(*group, {"spec", "minMember"});
      if (have == nullptr || *have != want["spec"]["minMember"]) {
        Delete(*group, want["apiVersion"].get<std::string>(), kPodGroupKind,
               "gang of another size (minMember " + (have ? have->dump() : std::string("unset")) +
                   ", now " + want["spec"]["minMember"].dump() + ")");
        pod_group_ready_ = false;
        Requeue(out_, 1);
      }
    } else if (job_.spec.scheduling_policy.gang.enabled) {
      Create(BuildPodGroup(job_), "gang scheduling");
      // Workers wait until the PodGroup is observed: created without it they would be placed
      // one by one (or never, when the scheduler's CRD is missing and the create fails). The
      // executor does not watch PodGroups, so look again soon.
      pod_group_ready_ = false;
      Requeue(out_, 1);
    }
  }

  void CreateMissingWorkers() {
    // Wait until every pod of an older epoch is gone, and until the key exists or is on its way.
    if (!stale_.empty() || !key_ready_ || !pod_group_ready_) return;
    if (status_.phase == JobPhase::kRunning) return;  // a missing pod then is a failure
    int created = 0;
    for (int64_t i = 0; i < job_.spec.replicas; ++i) {
      if (current_.count(i) != 0) continue;
      Create(BuildWorkerPod(job_, i, status_.epoch, settings_),
             "worker " + std::to_string(i) + " of epoch " + std::to_string(status_.epoch));
      ++created;
    }
    if (created == 0) return;
    if (status_.start_time.empty()) status_.start_time = FormatRfc3339(now_);
    if (status_.epoch_start_time.empty()) status_.epoch_start_time = FormatRfc3339(now_);
    const std::string message = "created " + std::to_string(created) + " worker pods for epoch " +
                                std::to_string(status_.epoch);
    Mark(kConditionCreated, true, kReasonWorkersCreated,
         "worker pods of epoch " + std::to_string(status_.epoch) + " created");
    Event(kEventNormal, kReasonWorkersCreated, message);
  }

  void UpdatePhase() {
    const int64_t replicas = job_.spec.replicas;
    if (static_cast<int64_t>(current_.size()) != replicas) return;
    bool all_running = true, all_succeeded = true;
    for (const auto& [index, entry] : current_) {
      all_running = all_running && entry.first.running && !entry.first.terminating;
      all_succeeded = all_succeeded && entry.first.outcome == WorkerOutcome::kSucceeded;
    }
    if (all_succeeded) {
      Finish(JobPhase::kSucceeded, kReasonAllWorkersSucceeded,
             "all " + std::to_string(replicas) + " workers of epoch " +
                 std::to_string(status_.epoch) + " succeeded");
      return;
    }
    if (all_running && status_.phase != JobPhase::kRunning) {
      status_.phase = JobPhase::kRunning;
      const std::string message = "all " + std::to_string(replicas) + " workers of epoch " +
                                  std::to_string(status_.epoch) + " are running";
      Mark(kConditionRunning, true, kReasonAllWorkersRunning, message);
      MarkIfPresent(kConditionRestarting, false, kReasonRecovered, message);
    }
  }

  const ObservedState& observed_;
  const OperatorSettings& settings_;
  HorovodJob job_;
  HorovodJobStatus status_;
  std::chrono::system_clock::time_point now_;
  int64_t generation_;
  std::string trainer_container_;
  std::vector<json> pods_;
  std::map<int64_t, std::pair<WorkerPodState, const json*>> current_;
  std::vector<const json*> stale_;
  std::set<std::string> deleted_;
  bool key_ready_ = true;
  bool pod_group_ready_ = true;
  std::optional<WorkloadState> workload_;  // a queued job's Workload, as observed
  std::string_view kueue_hold_reason_;
  ReconcileResult out_;
};

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
  return JobReconciler(observed, std::move(job).value()).Run();
}

}  // namespace korovod::k8s_operator
