// WriteJobStatus: a HorovodJob's status goes through /status with the resourceVersion that was
// read, so a write based on a stale object is refused (409) instead of overwriting someone else's
// change. On 409 the job is read again and the status recomputed from the fresh object.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "operator/kube/api_client.h"

namespace korovod::k8s_operator {

// Recomputes the status for a freshly read job; nullopt when the stored status is already right.
using StatusRecompute = std::function<std::optional<nlohmann::json>(const nlohmann::json& job)>;

struct StatusWriteOutcome {
  Status status;      // OK, the last conflict after max_attempts, or the first other error
  int conflicts = 0;  // 409s met (for the metric)
};

// `job` as read (metadata.namespace, name, resourceVersion). A job deleted meanwhile is OK.
StatusWriteOutcome WriteJobStatus(const kube::ApiClient& client, nlohmann::json job,
                                  nlohmann::json status, const StatusRecompute& recompute,
                                  int max_attempts = 4);

}  // namespace korovod::k8s_operator
