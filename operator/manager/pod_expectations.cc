#include "operator/manager/pod_expectations.h"

#include "common/json_read.h"

namespace korovod::k8s_operator {

PodExpectations::PodExpectations(std::chrono::steady_clock::duration timeout, Clock now)
    : timeout_(timeout),
      now_(now ? std::move(now) : Clock([] { return std::chrono::steady_clock::now(); })) {}

void PodExpectations::ExpectCreate(const std::string& job_key, const std::string& pod_name) {
  std::lock_guard<std::mutex> lock(mu_);
  Pending& p = pending_[job_key];
  p.creates.insert(pod_name);
  p.deadline = now_() + timeout_;
}

void PodExpectations::ExpectDelete(const std::string& job_key, const std::string& pod_uid) {
  if (pod_uid.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Pending& p = pending_[job_key];
  p.deletes.insert(pod_uid);
  p.deadline = now_() + timeout_;
}

void PodExpectations::ObserveLocked(Pending& p, const nlohmann::json& pod, bool deleted) {
  const std::string name = StringAt(pod, {"metadata", "name"});
  const std::string uid = StringAt(pod, {"metadata", "uid"});
  // Seen at all (even deleted at once): the create reached the cache's stream of events.
  p.creates.erase(name);
  if (deleted || Has(pod, {"metadata", "deletionTimestamp"})) p.deletes.erase(uid);
}

void PodExpectations::Observed(const std::string& job_key, const nlohmann::json& pod,
                               bool deleted) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job_key);
  if (it == pending_.end()) return;
  ObserveLocked(it->second, pod, deleted);
}

PodExpectations::Check PodExpectations::Satisfied(const std::string& job_key,
                                                  const std::vector<nlohmann::json>& pods) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(job_key);
  if (it == pending_.end()) return {};
  Pending& p = it->second;
  std::set<std::string> present;
  for (const nlohmann::json& pod : pods) {
    ObserveLocked(p, pod, false);
    present.insert(StringAt(pod, {"metadata", "uid"}));
  }
  // A delete whose pod is no longer in the cache has been observed.
  std::erase_if(p.deletes, [&present](const std::string& uid) { return !present.count(uid); });
  const auto now = now_();
  if ((p.creates.empty() && p.deletes.empty()) || now >= p.deadline) {
    pending_.erase(it);
    return {};
  }
  Check check;
  check.satisfied = false;
  check.time_left = p.deadline - now;
  for (const std::string& name : p.creates) {
    check.pending += (check.pending.empty() ? "" : ", ") + ("create of pod " + name);
  }
  for (const std::string& uid : p.deletes) {
    check.pending += (check.pending.empty() ? "" : ", ") + ("delete of pod uid " + uid);
  }
  return check;
}

void PodExpectations::Forget(const std::string& job_key) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.erase(job_key);
}

}  // namespace korovod::k8s_operator
