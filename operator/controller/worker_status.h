// The per-rank part of a HorovodJob's status, built so that it stays small at any world size:
// status.workers (only ranks that are not Ready, capped), status.rankSummary (every rank, as
// ranges) and status.finishedRanks (each rank's terminal state, as ranges; FinishedRankRecord).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/worker_pod_state.h"

namespace korovod::k8s_operator {

// Rank `rank`'s entry for an observed worker pod.
WorkerStatus WorkerStatusOf(int64_t rank, const WorkerPodState& s, const nlohmann::json& pod);

// "Ready:0-2,4 Pending:3": the ranks in each state (in the states' declared order), as ranges.
std::string RankSummary(const std::vector<WorkerStatus>& ranks);

// Sets status.workers and status.unlistedWorkers from every rank's entry: the ranks neither
// Ready nor Succeeded, at most kMaxListedWorkers of them, those with a reason (a failure, an
// image that does not pull) or no pod first, then by rank; listed in rank order.
void ListWorkers(const std::vector<WorkerStatus>& ranks, HorovodJobStatus& status);

// How each finished rank of the current epoch ended, kept across reconciles in
// status.finishedRanks: a rank's first terminal state is kept even once its pod is gone.
class FinishedRankRecord {
 public:
  struct Outcome {
    WorkerState state = WorkerState::kSucceeded;  // kSucceeded or kFailed
    std::string reason;
    std::string message;
  };

  // From status.finishedRanks. An entry whose ranks do not parse is dropped: the status was
  // written by this code, and a record rebuilt from the pods still present beats no reconcile.
  static FinishedRankRecord FromStatus(const std::vector<FinishedRanks>& entries);

  // Records a terminal pod's end for `rank`, unless the rank already ended (terminal is
  // terminal). Pods that did not end are ignored.
  void Observe(int64_t rank, const WorkerPodState& s);
  void Record(int64_t rank, Outcome outcome);
  const Outcome* Find(int64_t rank) const;
  const std::map<int64_t, Outcome>& ranks() const { return ranks_; }
  void Clear() { ranks_.clear(); }

  // One entry per (state, reason), with the lowest rank's message.
  std::vector<FinishedRanks> ToStatus() const;

 private:
  std::map<int64_t, Outcome> ranks_;
};

// The reasons FinishedRankRecord::Observe gives.
inline constexpr std::string_view kFinishedCompleted = "Completed";  // the trainer exited 0
inline constexpr std::string_view kFinishedError = "Error";          // a failure of the job's
inline constexpr std::string_view kFinishedDisrupted = "Disrupted";  // DisruptionTarget
inline constexpr std::string_view kFinishedDeleted = "Deleted";      // failed while deleted

}  // namespace korovod::k8s_operator
