#include "operator/manager/status_writer.h"

#include <utility>

#include "operator/kube/api_result.h"
#include "operator/manager/child_resource.h"

namespace korovod::k8s_operator {

nlohmann::json MergePatch(const nlohmann::json& from, const nlohmann::json& to) {
  if (!from.is_object() || !to.is_object()) return to;
  nlohmann::json patch = nlohmann::json::object();
  for (const auto& [key, value] : from.items()) {
    if (!to.contains(key)) patch[key] = nullptr;
  }
  for (const auto& [key, value] : to.items()) {
    const auto old = from.find(key);
    if (old == from.end()) {
      patch[key] = value;
    } else if (*old != value) {
      // A null in a patch means "remove", so a member that became null cannot be carried in a
      // nested patch; nothing here writes nulls.
      patch[key] = old->is_object() && value.is_object() ? MergePatch(*old, value) : value;
    }
  }
  return patch;
}

StatusWriteOutcome WriteJobStatus(const kube::ApiClient& client, nlohmann::json job,
                                  nlohmann::json status, const StatusRecompute& recompute,
                                  int max_attempts) {
  StatusWriteOutcome out;
  const std::string ns = job.at("metadata").value("namespace", "");
  const std::string name = job.at("metadata").value("name", "");
  for (int attempt = 1;; ++attempt) {
    const nlohmann::json empty = nlohmann::json::object();
    const auto current = job.find("status");
    nlohmann::json changes =
        MergePatch(current != job.end() && current->is_object() ? *current : empty, status);
    if (changes.empty()) return out;  // the stored status is already this one
    // The resourceVersion makes the patch conditional: a stale write is refused with 409.
    const nlohmann::json patch = {
        {"metadata", {{"resourceVersion", job.at("metadata").value("resourceVersion", "")}}},
        {"status", std::move(changes)}};
    kube::ApiResult r = client.Patch(kHorovodJobs.Path(ns, name, "status"), patch,
                                     kube::PatchOptions{kube::PatchType::kMerge, "", false});
    if (r.ok()) return out;
    if (!kube::IsConflict(r) || attempt >= max_attempts) {
      out.status = r.status().WithContext("write the status of HorovodJob " + ns + "/" + name);
      return out;
    }
    ++out.conflicts;
    kube::ApiResult fresh = client.Get(kHorovodJobs.Path(ns, name));
    if (kube::IsNotFound(fresh)) return out;
    if (!fresh.ok()) {
      out.status = fresh.status();
      return out;
    }
    job = std::move(fresh).value();
    std::optional<nlohmann::json> recomputed = recompute(job);
    if (!recomputed) return out;  // the stored status is already right
    status = std::move(*recomputed);
  }
}

}  // namespace korovod::k8s_operator
