#include "operator/controller/worker_status.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "operator/api/rank_ranges.h"
#include "operator/controller/json_access.h"

namespace korovod::k8s_operator {

WorkerStatus WorkerStatusOf(int64_t rank, const WorkerPodState& s, const nlohmann::json& pod) {
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
    w.reason = s.disrupted ? kFinishedDisrupted : kFinishedError;
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

std::string RankSummary(const std::vector<WorkerStatus>& ranks) {
  std::vector<std::vector<int64_t>> by_state(kWorkerStateNames.size());
  for (const WorkerStatus& w : ranks) by_state[static_cast<size_t>(w.state)].push_back(w.rank);
  std::string out;
  for (size_t state = 0; state < by_state.size(); ++state) {
    if (by_state[state].empty()) continue;
    out += out.empty() ? "" : " ";
    out += std::string(kWorkerStateNames[state]) + ":" + FormatRanges(by_state[state]);
  }
  return out;
}

void ListWorkers(const std::vector<WorkerStatus>& ranks, HorovodJobStatus& status) {
  std::vector<const WorkerStatus*> why, rest;
  for (const WorkerStatus& w : ranks) {
    if (w.state == WorkerState::kReady || w.state == WorkerState::kSucceeded) continue;
    const bool explained = !w.reason.empty() || w.state == WorkerState::kMissing ||
                           w.state == WorkerState::kFailed || w.state == WorkerState::kTerminating;
    (explained ? why : rest).push_back(&w);
  }
  std::vector<const WorkerStatus*> listed = std::move(why);
  listed.insert(listed.end(), rest.begin(), rest.end());
  const size_t total = listed.size();
  if (listed.size() > kMaxListedWorkers) listed.resize(kMaxListedWorkers);
  std::sort(listed.begin(), listed.end(),
            [](const WorkerStatus* a, const WorkerStatus* b) { return a->rank < b->rank; });
  status.workers.clear();
  for (const WorkerStatus* w : listed) status.workers.push_back(*w);
  status.unlisted_workers = static_cast<int64_t>(total - listed.size());
}

FinishedRankRecord FinishedRankRecord::FromStatus(const std::vector<FinishedRanks>& entries) {
  FinishedRankRecord record;
  for (const FinishedRanks& f : entries) {
    auto ranks = ParseRanges(f.ranks);
    if (!ranks.ok()) continue;
    for (const int64_t rank : *ranks) {
      record.Record(rank, Outcome{f.state, f.reason, f.message});
    }
  }
  return record;
}

void FinishedRankRecord::Observe(int64_t rank, const WorkerPodState& s) {
  switch (s.outcome) {
    case WorkerOutcome::kActive:
      return;
    case WorkerOutcome::kSucceeded:
      Record(rank, Outcome{WorkerState::kSucceeded, std::string(kFinishedCompleted), ""});
      return;
    case WorkerOutcome::kFailed:
      if (s.disrupted) {
        Record(rank, Outcome{WorkerState::kFailed, std::string(kFinishedDisrupted),
                             "worker pod " + s.name + ": " + s.disruption});
      } else if (s.terminating) {
        Record(rank, Outcome{WorkerState::kFailed, std::string(kFinishedDeleted),
                             "worker pod " + s.name + " was deleted"});
      } else {
        Record(rank, Outcome{WorkerState::kFailed, std::string(kFinishedError),
                             "worker pod " + s.name + " failed: " + s.cause});
      }
      return;
  }
}

void FinishedRankRecord::Record(int64_t rank, Outcome outcome) {
  ranks_.emplace(rank, std::move(outcome));  // the first end is kept
}

const FinishedRankRecord::Outcome* FinishedRankRecord::Find(int64_t rank) const {
  const auto it = ranks_.find(rank);
  return it == ranks_.end() ? nullptr : &it->second;
}

std::vector<FinishedRanks> FinishedRankRecord::ToStatus() const {
  // Grouped by (state, reason) in that order, so the entries do not move as ranks finish.
  std::map<std::pair<WorkerState, std::string>, std::pair<std::vector<int64_t>, std::string>>
      groups;
  for (const auto& [rank, o] : ranks_) {  // in rank order: the first message is the lowest's
    auto& [ranks, message] = groups[{o.state, o.reason}];
    if (ranks.empty()) message = o.message;
    ranks.push_back(rank);
  }
  std::vector<FinishedRanks> out;
  for (const auto& [key, group] : groups) {
    out.push_back(FinishedRanks{FormatRanges(group.first), key.first, key.second, group.second});
  }
  return out;
}

}  // namespace korovod::k8s_operator
