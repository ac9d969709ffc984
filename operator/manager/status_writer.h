// WriteJobStatus: a HorovodJob's status goes through /status as a JSON merge patch (RFC 7386) of
// only the fields that changed, with the resourceVersion that was read, so a write based on a
// stale object is refused (409) instead of overwriting someone else's change, and a status that
// moves one rank at a time sends one rank's worth of bytes rather than the whole status (a
// 1000-worker start wrote O(N^2) bytes with PUTs). On 409 the job is read again and the status
// recomputed from the fresh object.
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

// `job` as read (metadata.namespace, name, resourceVersion, status). A job deleted meanwhile is
// OK.
StatusWriteOutcome WriteJobStatus(const kube::ApiClient& client, nlohmann::json job,
                                  nlohmann::json status, const StatusRecompute& recompute,
                                  int max_attempts = 4);

// The RFC 7386 merge patch that turns `from` into `to`: changed members, null for removed ones;
// an array or scalar that differs is carried whole. An empty object when they are equal.
nlohmann::json MergePatch(const nlohmann::json& from, const nlohmann::json& to);

}  // namespace korovod::k8s_operator
