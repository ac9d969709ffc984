// JobReconciler, a static job's epochs: which pods are the current epoch's, what counts as a
// failure, a resize, the epoch's children and workers, and the phase they add up to.
#include <cstdlib>
#include <string>

#include "common/rfc3339.h"
#include "operator/api/conditions.h"
#include "operator/controller/child_names.h"
#include "operator/controller/job_reconciler.h"
#include "operator/controller/json_access.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/reasons.h"
#include "operator/controller/worker_pod_builder.h"
#include "operator/controller/world_config_map.h"

namespace korovod::k8s_operator::internal {

// Splits the observed pods into the current epoch's (by replica index) and the rest.
void JobReconciler::PartitionPods() {
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

JobReconciler::Failure JobReconciler::FindFailure() const {
  Failure f;
  std::string first, first_disrupted;
  for (int64_t i = 0; i < job_.spec.replicas; ++i) {
    auto it = current_.find(i);
    std::string why;
    bool disrupted = false;
    if (it == current_.end()) {
      // A rank that ended keeps its end: a Succeeded one is done, not lost.
      if (const FinishedRankRecord::Outcome* o = finished_.Find(i)) {
        if (o->state == WorkerState::kSucceeded) continue;
        why = o->message;
        disrupted = o->reason == kFinishedDisrupted;
      } else if (status_.phase == JobPhase::kRunning) {
        // Before the world ran, a missing pod is just (re)created; once it ran, its rank is
        // gone.
        why =
            "worker pod " + WorkerPodName(job_, i) + " disappeared (deleted outside the operator)";
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

// A failure restarts the whole world as a new epoch (a disruption without counting against
// backoffLimit), or fails the job once backoffLimit restarts were used. False when it failed.
bool JobReconciler::RestartAfter(const Failure& failure) {
  const int64_t limit = job_.spec.run_policy.backoff_limit;
  if (!failure.disruption && status_.restart_count >= limit) {
    Count();
    Finish(JobPhase::kFailed, kReasonBackoffLimitExceeded,
           failure.cause + "; backoffLimit " + std::to_string(limit) + " reached after " +
               std::to_string(status_.restart_count) + " restarts");
    return false;
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
    message +=
        " (restart " + std::to_string(status_.restart_count) + " of " + std::to_string(limit) + ")";
  }
  const std::string_view reason = failure.disruption ? kReasonWorkerDisrupted : kReasonWorkerFailed;
  status_.phase = JobPhase::kRestarting;
  Mark(kConditionRestarting, true, reason, message);
  MarkIfPresent(kConditionRunning, false, reason, message);
  Event(kEventWarning, reason, message);
  return true;
}

// Starts a new epoch: every existing pod becomes stale and is deleted before the new ones
// are created, so ranks of two epochs never meet in one world.
void JobReconciler::NewEpoch() {
  ++status_.epoch;
  status_.world_size = WorldSize(job_.spec);
  status_.epoch_start_time.clear();  // set when its workers are created
  finished_.Clear();
  PartitionPods();
}

// spec.replicas changed while a world runs: membership is an epoch, so the whole world starts
// over at the new size. Not a failure: restartCount stays. The current epoch's size is in
// status.worldSize, written with the epoch itself, so no resize is missed (a ConfigMap being
// recreated, as the size's earlier home was, leaves a window without it). A status written
// before worldSize existed falls back to the world ConfigMap.
void JobReconciler::MaybeResize() {
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
                              "; restarting all workers as epoch " + std::to_string(status_.epoch);
  status_.phase = JobPhase::kRestarting;
  Mark(kConditionRestarting, true, kReasonWorldResized, message);
  MarkIfPresent(kConditionRunning, false, kReasonWorldResized, message);
  Event(kEventNormal, kReasonWorldResized, message);
}

// The world ConfigMap and the PodGroup of the current epoch.
void JobReconciler::EnsureEpochChildren() {
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

void JobReconciler::CreateMissingWorkers() {
  // Wait until every pod of an older epoch is gone, and until the key exists or is on its way.
  if (!stale_.empty() || !key_ready_ || !pod_group_ready_) return;
  if (status_.phase == JobPhase::kRunning) return;  // a missing pod then is a failure
  int created = 0;
  for (int64_t i = 0; i < job_.spec.replicas; ++i) {
    if (current_.count(i) != 0 || finished_.Find(i) != nullptr) continue;  // ended: done
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

void JobReconciler::UpdatePhase() {
  const int64_t replicas = job_.spec.replicas;
  if (!AllPresentOrSucceeded()) return;
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

}  // namespace korovod::k8s_operator::internal
