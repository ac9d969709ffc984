#include "operator/kube/api_result.h"

#include "common/json_read.h"

namespace korovod::kube {

StatusCode StatusCodeForHttp(int code) {
  switch (code) {
    case 400:
    case 422:
      return StatusCode::kInvalidArgument;
    case 401:
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
    case 410:
      return StatusCode::kFailedPrecondition;
    case 409:
      return StatusCode::kAborted;
    case 408:
    case 504:
      return StatusCode::kDeadlineExceeded;
    case 429:
      return StatusCode::kUnavailable;
    default:
      return code >= 500 ? StatusCode::kUnavailable : StatusCode::kInternal;
  }
}

ApiResult ApiErrorFromStatusObject(const std::string& what, const nlohmann::json& status) {
  const int code = static_cast<int>(IntAt(status, {"code"}).value_or(0));
  const std::string reason = StringAt(status, {"reason"});
  const std::string message = StringAt(status, {"message"});
  std::string text = what + ": HTTP " + std::to_string(code);
  if (!reason.empty()) text += " " + reason;
  if (!message.empty()) text += ": " + message;
  return ApiResult(Status(StatusCodeForHttp(code), text), code, reason);
}

ApiResult ApiErrorFromResponse(const std::string& what, int http_code, const std::string& body) {
  nlohmann::json status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_discarded() || !status.is_object() || StringAt(status, {"kind"}) != "Status") {
    // Not from the API server proper (a proxy, a load balancer): keep the start of the body.
    status = {{"message", body.substr(0, 256)}};
  }
  status["code"] = http_code;  // the HTTP code wins over the body's
  return ApiErrorFromStatusObject(what, status);
}

bool IsNotFound(const ApiResult& r) { return r.http_code() == 404; }
bool IsAlreadyExists(const ApiResult& r) {
  return r.http_code() == 409 && r.reason() == kReasonAlreadyExists;
}
bool IsConflict(const ApiResult& r) {
  return r.http_code() == 409 && r.reason() != kReasonAlreadyExists;
}
bool IsGone(const ApiResult& r) {
  return r.http_code() == 410 || r.reason() == kReasonExpired || r.reason() == kReasonGone;
}

}  // namespace korovod::kube
