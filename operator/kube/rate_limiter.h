// Client-side rate limiting of API requests, as client-go's flowcontrol token bucket (QPS and
// burst): a bucket of `burst` tokens refilled at `qps` per second; each request takes one. A
// request that finds the bucket empty takes a token the bucket has not refilled yet and waits
// until it has: tokens are handed out in the order they are asked for, so one busy caller cannot
// starve the others, and each wait is fixed when it is reserved (at most the queue ahead of it
// divided by qps), never open-ended.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>

namespace korovod::kube {

class TokenBucket {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // `qps` <= 0 disables the limit (Reserve always returns 0). `burst` < 1 counts as 1. `now` is
  // injectable for tests; by default the steady clock.
  TokenBucket(double qps, int burst, Clock now = nullptr);

  // Takes one token and returns how long the caller must wait before it may send (0 when a
  // token was in the bucket).
  std::chrono::nanoseconds Reserve();
  // Reserve, then sleep for the returned time; returns it (for the wait metric).
  std::chrono::nanoseconds Wait();

  double qps() const { return qps_; }
  int burst() const { return burst_; }

 private:
  const double qps_;
  const int burst_;
  const Clock now_;
  std::mutex mu_;
  double tokens_;  // negative: tokens already promised to waiting callers
  std::chrono::steady_clock::time_point last_;
};

}  // namespace korovod::kube
