// JobReconciler, the end of a job: finishing (conditions, event), the cleanPodPolicy and the TTL,
// the active deadline and the start-up timeout.
#include <string>

#include "common/rfc3339.h"
#include "operator/api/conditions.h"
#include "operator/controller/job_reconciler.h"
#include "operator/controller/json_access.h"
#include "operator/controller/reasons.h"

namespace korovod::k8s_operator::internal {

void JobReconciler::Finish(JobPhase phase, std::string_view reason, const std::string& message) {
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
void JobReconciler::CleanUpFinished() {
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
  const int64_t finished_for = SecondsSince("completionTime", status_.completion_time, *completed);
  if (finished_for >= *ttl) {
    out_.actions.push_back(Action{Action::Kind::kDeleteJob,
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

bool JobReconciler::DeadlineExpired() {
  const auto& deadline = job_.spec.run_policy.active_deadline_seconds;
  if (!deadline || status_.start_time.empty()) return false;
  std::optional<int64_t> start = UnixSeconds(status_.start_time);
  if (!start) {
    status_.start_time = FormatRfc3339(now_);
    start = observed_.now_unix;
  }
  return SecondsSince("startTime", status_.start_time, *start) >= *deadline;
}

void JobReconciler::RequeueForDeadline() {
  const auto& deadline = job_.spec.run_policy.active_deadline_seconds;
  if (!deadline || status_.start_time.empty()) return;
  const std::optional<int64_t> start = UnixSeconds(status_.start_time);
  if (start) Requeue(out_, *deadline - SecondsSince("startTime", status_.start_time, *start));
}

// The epoch's workers must all run within spec.runPolicy.startupTimeoutSeconds of the epoch's
// start (the sidecars' own rendezvous waits as long: BuildSidecarContainer). Past it the job
// fails naming the ranks that never came, instead of sidecars crash-looping under a Pending
// job for ever. Returns true when it failed the job.
bool JobReconciler::StartupTimedOut() {
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
  for (const WorkerStatus& w : ranks_) {
    if (w.state == WorkerState::kRunning || w.state == WorkerState::kReady ||
        w.state == WorkerState::kSucceeded) {
      continue;
    }
    ++count;
    if (count > 8) continue;  // the message stays readable; status.rankSummary has them all
    missing += missing.empty() ? "" : "; ";
    missing += "rank " + std::to_string(w.rank) + " (" + w.pod + ": " + std::string(Name(w.state)) +
               (w.message.empty() ? "" : ", " + w.message) + ")";
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
             "spec.runPolicy.startupTimeoutSeconds (" + std::to_string(timeout) + "s): " + missing);
  return true;
}

}  // namespace korovod::k8s_operator::internal
