#include "common/status.h"

#include <cstring>

namespace korovod {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithSubject(const std::string& subject) const {
  if (ok()) return *this;
  if (message_.compare(0, subject.size(), subject) == 0) {
    const char next = message_.size() > subject.size() ? message_[subject.size()] : ':';
    if (next == ':' || next == ' ') return *this;  // already about it
  }
  return WithContext(subject);
}

Status ErrnoStatus(StatusCode code, const std::string& what, int err) {
  return Status(code, what + ": " + std::strerror(err));
}

}  // namespace korovod
