// PodExpectations: controller-runtime's and the ReplicaSet controller's "expectations" for the
// pods of elastic jobs. After the executor creates or deletes a job's pods, the job's pod set is
// not acted on again until the pod informer has seen those creates (the pod, by name) and
// deletes (the pod gone, or terminating, by uid), or until `timeout` has passed since the last
// of them (client-go's 5 minutes: a watch event lost for good must not stall the job forever).
// Without this a reconcile running on a cache that lags its own creates sees the new pods
// missing and creates replacements at fresh indices: an elastic world larger than spec.replicas.
//
// Thread-safe. Observations come from the pod informer's handlers (Observed) and from the
// cache at reconcile time (Satisfied), so a pod created and deleted before a re-list still counts.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace korovod::k8s_operator {

class PodExpectations {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  static constexpr std::chrono::minutes kDefaultTimeout{5};

  explicit PodExpectations(std::chrono::steady_clock::duration timeout = kDefaultTimeout,
                           Clock now = nullptr);

  void ExpectCreate(const std::string& job_key, const std::string& pod_name);
  void ExpectDelete(const std::string& job_key, const std::string& pod_uid);
  // A pod event seen by the informer: a pod present satisfies its create; one deleted or
  // terminating satisfies its delete.
  void Observed(const std::string& job_key, const nlohmann::json& pod, bool deleted);

  struct Check {
    bool satisfied = true;
    // While not satisfied: what is still awaited (for the log) and when it gives up waiting.
    std::string pending;
    std::chrono::steady_clock::duration time_left{0};
  };
  // Marks what `pods` (the job's pods in the cache now) satisfy, then says whether the job may
  // be acted on. Expectations that timed out are dropped (satisfied).
  Check Satisfied(const std::string& job_key, const std::vector<nlohmann::json>& pods);
  void Forget(const std::string& job_key);

 private:
  struct Pending {
    std::set<std::string> creates;  // pod names
    std::set<std::string> deletes;  // pod uids
    std::chrono::steady_clock::time_point deadline;
  };
  void ObserveLocked(Pending& p, const nlohmann::json& pod, bool deleted);

  const std::chrono::steady_clock::duration timeout_;
  const Clock now_;
  std::mutex mu_;
  std::map<std::string, Pending> pending_;  // by job key "ns/name"
};

}  // namespace korovod::k8s_operator
