#include "operator/manager/observed_ages.h"

#include "operator/controller/json_access.h"
#include "operator/controller/observed_state.h"

namespace korovod::k8s_operator {

std::map<std::string, int64_t> ObservedAges::Observe(const std::string& job_key,
                                                     const nlohmann::json& job,
                                                     const std::vector<nlohmann::json>& pods) {
  std::vector<std::string> keys;
  for (const char* field : {"startTime", "epochStartTime", "completionTime"}) {
    const std::string value = StringAt(job, {"status", field});
    if (!value.empty()) keys.push_back(ObservedAgeKey(field, value));
  }
  for (const nlohmann::json& pod : pods) {
    const std::string value = StringAt(pod, {"metadata", "deletionTimestamp"});
    if (value.empty()) continue;
    keys.push_back(
        ObservedAgeKey("deletionTimestamp/" + StringAt(pod, {"metadata", "uid"}), value));
  }
  const auto now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::chrono::steady_clock::time_point>& seen = first_seen_[job_key];
  std::map<std::string, std::chrono::steady_clock::time_point> kept;
  std::map<std::string, int64_t> ages;
  for (const std::string& key : keys) {
    const auto it = seen.find(key);
    const auto first = it == seen.end() ? now : it->second;
    kept[key] = first;
    ages[key] = std::chrono::duration_cast<std::chrono::seconds>(now - first).count();
  }
  seen = std::move(kept);
  return ages;
}

void ObservedAges::Forget(const std::string& job_key) {
  std::lock_guard<std::mutex> lock(mu_);
  first_seen_.erase(job_key);
}

size_t ObservedAges::JobsKept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_seen_.size();
}

}  // namespace korovod::k8s_operator
