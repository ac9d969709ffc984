// ObservedAges: how long this operator has seen each time a job's deadlines are timed from
// (ObservedState::observed_ages), by its own monotonic clock, as leader_election.h times another
// holder's lease. The times themselves were written by other clocks (an earlier leader's, the API
// server's for deletionTimestamp): compared with this operator's wall clock, one hours ahead
// would delete a finished job at once, fail a running one on its activeDeadlineSeconds or
// force-delete a pod within its grace period. Timed from the first sight instead, a deadline
// never ends early; after a failover or restart it may end up to its length late.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace korovod::k8s_operator {

class ObservedAges {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  explicit ObservedAges(Clock now = [] { return std::chrono::steady_clock::now(); })
      : now_(std::move(now)) {}

  // The ages in whole seconds of the timed values of `job` (status startTime, epochStartTime,
  // completionTime) and of its terminating `pods` (deletionTimestamp), keyed ObservedAgeKey: 0
  // for a value first seen now. The job's values not present any more are forgotten. `job_key`
  // names the job ("ns/name"). Thread-safe.
  std::map<std::string, int64_t> Observe(const std::string& job_key, const nlohmann::json& job,
                                         const std::vector<nlohmann::json>& pods);
  // Drops what is kept for a deleted job.
  void Forget(const std::string& job_key);
  size_t JobsKept() const;

 private:
  const Clock now_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, std::chrono::steady_clock::time_point>> first_seen_;
};

}  // namespace korovod::k8s_operator
