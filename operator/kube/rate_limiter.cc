#include "operator/kube/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace korovod::kube {

TokenBucket::TokenBucket(double qps, int burst, Clock now)
    : qps_(qps),
      burst_(std::max(burst, 1)),
      now_(now ? std::move(now) : Clock([] { return std::chrono::steady_clock::now(); })),
      tokens_(burst_),
      last_(now_()) {}

std::chrono::nanoseconds TokenBucket::Reserve() {
  if (qps_ <= 0) return std::chrono::nanoseconds(0);
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = now_();
  if (now > last_) {
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min<double>(burst_, tokens_ + elapsed * qps_);
    last_ = now;
  }
  tokens_ -= 1;
  if (tokens_ >= 0) return std::chrono::nanoseconds(0);
  // -tokens_ tokens are owed, this caller's included: it waits until the last of them refills.
  return std::chrono::nanoseconds(static_cast<int64_t>(-tokens_ / qps_ * 1e9));
}

std::chrono::nanoseconds TokenBucket::Wait() {
  const std::chrono::nanoseconds wait = Reserve();
  if (wait.count() > 0) std::this_thread::sleep_for(wait);
  return wait;
}

}  // namespace korovod::kube
