// The outcome of one API request: the decoded JSON body, or an error that keeps the HTTP code
// and the API server's Status reason next to the korovod Status, so IsNotFound/IsConflict never
// parse a message. It has StatusOr's shape (ok, status, value), so KV_ASSIGN_OR_RETURN works.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/status.h"

namespace korovod::kube {

// Reasons the API server puts in metav1.Status.reason.
inline constexpr char kReasonNotFound[] = "NotFound";
inline constexpr char kReasonAlreadyExists[] = "AlreadyExists";
inline constexpr char kReasonConflict[] = "Conflict";
inline constexpr char kReasonExpired[] = "Expired";
inline constexpr char kReasonGone[] = "Gone";

class [[nodiscard]] ApiResult {
 public:
  ApiResult(nlohmann::json body) : body_(std::move(body)) {}  // NOLINT: success, like StatusOr
  // An error. `status` must not be OK. http_code 0 = no HTTP response (connect, TLS, timeout).
  ApiResult(Status status, int http_code = 0, std::string reason = "")
      : status_(std::move(status)), http_code_(http_code), reason_(std::move(reason)) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  int http_code() const { return http_code_; }
  const std::string& reason() const { return reason_; }

  nlohmann::json& value() & { return body_; }
  const nlohmann::json& value() const& { return body_; }
  nlohmann::json&& value() && { return std::move(body_); }
  nlohmann::json* operator->() { return &body_; }
  nlohmann::json& operator*() { return body_; }

 private:
  Status status_;
  int http_code_ = 0;
  std::string reason_;
  nlohmann::json body_;
};

// The error for an HTTP failure. `what` is "GET /api/v1/..."; `body` is the response body (a
// metav1.Status when the API server produced it). The message names what, the code, the reason
// and the server's message.
ApiResult ApiErrorFromResponse(const std::string& what, int http_code, const std::string& body);
// Same, from an already decoded metav1.Status object (watch ERROR events).
ApiResult ApiErrorFromStatusObject(const std::string& what, const nlohmann::json& status);

// The korovod code for an HTTP status: 404/410 kFailedPrecondition, 409 kAborted, 400/422
// kInvalidArgument, 401/403 kPermissionDenied, 408/504 kDeadlineExceeded, 429/5xx kUnavailable.
StatusCode StatusCodeForHttp(int http_code);

bool IsNotFound(const ApiResult& r);
bool IsAlreadyExists(const ApiResult& r);
bool IsConflict(const ApiResult& r);  // 409 other than AlreadyExists: a stale resourceVersion
bool IsGone(const ApiResult& r);      // 410, or reason Expired/Gone: resourceVersion too old

}  // namespace korovod::kube
