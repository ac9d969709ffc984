// Deadline: every wait in the runtime is bounded by one.
#pragma once

#include <chrono>
#include <cstdint>

namespace korovod {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline After(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  static Deadline Infinite() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  bool Expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  // This deadline, or `d` from now if that comes first: one attempt's share of an overall wait.
  Deadline Sooner(std::chrono::milliseconds d) const {
    const Clock::time_point soon = Clock::now() + d;
    return Deadline(soon < at_ ? soon : at_);
  }
  // Milliseconds left, clamped to [0, cap]; for poll(2).
  int RemainingMs(int cap = 1 << 30) const {
    if (at_ == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > cap ? cap : static_cast<int>(left);
  }

 private:
  Clock::time_point at_;
};

}  // namespace korovod
