#include "operator/kube/conflict_retry.h"

#include <thread>

namespace korovod::kube {

ApiResult RetryOnConflict(const ApiClient& client, const std::string& path,
                          const std::function<Status(nlohmann::json& object)>& mutate,
                          const RetryOnConflictOptions& options) {
  const std::string target = options.status_subresource ? path + "/status" : path;
  auto backoff = options.backoff;
  ApiResult last(Aborted("update " + target + ": max_attempts must be >= 1"));
  for (int attempt = 1; attempt <= options.max_attempts; ++attempt) {
    ApiResult current = client.Get(path);
    if (!current.ok()) return current;
    nlohmann::json object = std::move(current).value();
    Status status = mutate(object);
    if (!status.ok()) return ApiResult(status.WithContext("update " + target));
    last = client.Replace(target, object);
    if (!IsConflict(last)) return last;
    if (attempt < options.max_attempts) {
      std::this_thread::sleep_for(backoff);
      backoff *= 2;
    }
  }
  return ApiResult(last.status().WithContext("gave up after " +
                                             std::to_string(options.max_attempts) + " conflicts"),
                   last.http_code(), last.reason());
}

}  // namespace korovod::kube
