#include "runtime/device/device_api.h"

#include <chrono>
#include <cstdio>
#include <thread>

namespace korovod {

std::string UuidString(const DeviceUuid& u) {
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

Status NotReady(std::string what) {
  return Status(StatusCode::kUnavailable, std::move(what) + ": not ready");
}

bool IsNotReady(const Status& s) {
  const std::string& m = s.message();
  return s.code() == StatusCode::kUnavailable && m.size() >= 11 &&
         m.compare(m.size() - 11, 11, ": not ready") == 0;
}

Status PollUntilReady(const std::function<Status()>& query, Deadline deadline,
                      const std::string& what) {
  for (int polls = 0;; ++polls) {
    Status s = query();
    if (!IsNotReady(s)) return s;
    if (deadline.Expired()) return DeadlineExceeded(what + ": not complete before the deadline");
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

}  // namespace korovod
