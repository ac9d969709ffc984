// Read-modify-write with optimistic concurrency: GET, mutate, PUT with the resourceVersion just
// read; a 409 Conflict (someone wrote in between) re-reads and tries again.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "operator/kube/api_client.h"
#include "operator/kube/api_result.h"
#include "common/status.h"

namespace korovod::kube {

struct RetryOnConflictOptions {
  int max_attempts = 5;
  bool status_subresource = false;        // PUT to <path>/status (the GET stays on <path>)
  std::chrono::milliseconds backoff{10};  // before a retry; doubles
};

// `path` names one object. `mutate` edits it in place; a non-OK Status aborts without writing.
// Returns the object as written, the first non-conflict error, or the last conflict after
// max_attempts.
ApiResult RetryOnConflict(const ApiClient& client, const std::string& path,
                          const std::function<Status(nlohmann::json& object)>& mutate,
                          const RetryOnConflictOptions& options = {});

}  // namespace korovod::kube
