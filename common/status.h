// Status and StatusOr: the error type at every module edge of the runtime.
// A failure carries a code and a message that names its cause (rank, host:port, tensor).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace korovod {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kDeadlineExceeded,
  kUnavailable,  // a peer is gone or unreachable
  kPermissionDenied,
  kInternal,
  kFailedPrecondition,
  kAborted,
  kUnimplemented,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Prefixes context ("allreduce of 4096 bytes: ") so a deep failure reads like a backtrace.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }
  // WithContext, unless the message already begins with that subject ("rank 3 (host h): ...",
  // "rank 3: ..."; not "rank 31"): an error names its rank once however many layers add it.
  Status WithSubject(const std::string& subject) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }

// Error from errno with the failing call named.
Status ErrnoStatus(StatusCode code, const std::string& what, int err);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit like absl
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& value() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace korovod

#define KV_CONCAT_INNER(a, b) a##b
#define KV_CONCAT(a, b) KV_CONCAT_INNER(a, b)

// Propagates a non-OK Status to the caller.
#define KV_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::korovod::Status _kv_status = (expr);   \
    if (!_kv_status.ok()) return _kv_status; \
  } while (0)

#define KV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL(KV_CONCAT(_kv_statusor_, __LINE__), lhs, expr)
