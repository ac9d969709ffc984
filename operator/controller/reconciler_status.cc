// JobReconciler, the counts and the per-rank status (worker_status.h): every rank's entry,
// status.workers and rankSummary from it, and the finished ranks kept in status.finishedRanks.
#include <string>

#include "operator/api/conditions.h"
#include "operator/controller/child_names.h"
#include "operator/controller/job_reconciler.h"
#include "operator/controller/reasons.h"

namespace korovod::k8s_operator::internal {

void JobReconciler::Count() {
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
  // Ranks that ended and whose pods are gone since (PodGC, a removed node).
  for (const auto& [rank, o] : finished_.ranks()) {
    if (current_.count(rank) != 0) continue;
    ++(o.state == WorkerState::kSucceeded ? status_.succeeded_workers : status_.failed_workers);
  }
}

// Records how the current epoch's finished workers ended (status.finishedRanks), so that a
// rank keeps its end once its pod is gone.
void JobReconciler::RecordOutcomes() {
  for (const auto& [index, entry] : current_) finished_.Observe(index, entry.first);
}

// Every rank's entry (ranks_), then status.workers and status.rankSummary from it.
void JobReconciler::PublishRanks() {
  status_.rank_summary = RankSummary(ranks_);
  ListWorkers(ranks_, status_);
}

// One entry per rank of the current epoch, in rank order; a rank whose pod is gone after it
// ended keeps its end.
void JobReconciler::ReportWorkers() {
  ranks_.clear();
  for (int64_t rank = 0; rank < job_.spec.replicas; ++rank) {
    const auto it = current_.find(rank);
    if (it != current_.end()) {
      ranks_.push_back(WorkerStatusOf(rank, it->second.first, *it->second.second));
      continue;
    }
    WorkerStatus w;
    w.rank = rank;
    w.pod = WorkerPodName(job_, rank);
    if (const FinishedRankRecord::Outcome* o = finished_.Find(rank)) {
      w.state = o->state;
      w.reason = o->reason;
      w.message = o->message;
    }
    ranks_.push_back(std::move(w));
  }
  PublishRanks();
}

// Names a current worker pod that cannot start, with the Kubernetes reason and message,
// instead of a silent Pending. Only a report: the job is not failed for it (the image may yet
// appear, a node may yet be added); activeDeadlineSeconds bounds the wait. The condition stays
// True until every worker runs, so it does not flap while the kubelet alternates between
// ErrImagePull and ImagePullBackOff or retries a pull.
void JobReconciler::ReportNotStarting() {
  const WorkerPodState* first = nullptr;
  int blocked = 0;
  bool all_running = AllPresentOrSucceeded();
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

// Every rank of the epoch has its pod, or succeeded and its pod is gone since.
bool JobReconciler::AllPresentOrSucceeded() const {
  for (int64_t i = 0; i < job_.spec.replicas; ++i) {
    if (current_.count(i) != 0) continue;
    const FinishedRankRecord::Outcome* o = finished_.Find(i);
    if (o == nullptr || o->state != WorkerState::kSucceeded) return false;
  }
  return true;
}

}  // namespace korovod::k8s_operator::internal
