#include "operator/manager/status_writer.h"

#include "operator/kube/api_result.h"
#include "operator/manager/child_resource.h"

namespace korovod::k8s_operator {

StatusWriteOutcome WriteJobStatus(const kube::ApiClient& client, nlohmann::json job,
                                  nlohmann::json status, const StatusRecompute& recompute,
                                  int max_attempts) {
  StatusWriteOutcome out;
  const std::string ns = job.at("metadata").value("namespace", "");
  const std::string name = job.at("metadata").value("name", "");
  for (int attempt = 1;; ++attempt) {
    job["status"] = std::move(status);
    kube::ApiResult r = client.Replace(kHorovodJobs.Path(ns, name, "status"), job);
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
