// WaitPolicy: how a rank waits for a peer. Measured on 2-vCPU VMs: spinning wins while ranks fit
// on cores; oversubscribed (or with another busy process), spinning steals the core the peer
// needs, and pure blocking costs ~27-60 us per wake. So: spin for a few microseconds (bounded by
// time: 2000 `pause`s took 54 us on one EPYC), then sched_yield for ~20 us, then block.
#pragma once

#include <sched.h>

#include <chrono>

namespace korovod {

struct WaitPolicy {
  std::chrono::nanoseconds spin{5000};         // busy polling before yielding
  std::chrono::microseconds yield_window{20};  // sched_yield polling before blocking

  // `local_ranks` ranks share the `cores` this process may run on.
  static WaitPolicy For(int local_ranks, int cores) {
    WaitPolicy p;
    if (local_ranks > cores) p.spin = std::chrono::nanoseconds(0);  // the peer needs our core
    return p;
  }
};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  asm volatile("" ::: "memory");
#endif
}

// Tracks one idle period: spin, then yield, then tell the caller to block. The clock is read
// only every few polls so that a spin poll stays a handful of nanoseconds.
class IdleWaiter {
 public:
  explicit IdleWaiter(const WaitPolicy& p) : policy_(p) {}
  void Reset() { polls_ = 0; }
  // Returns true when the caller should block in the kernel.
  bool Pause() {
    if (polls_++ == 0) {
      start_ = std::chrono::steady_clock::now();
      phase_ = policy_.spin.count() > 0 ? Phase::kSpin : Phase::kYield;
    }
    if (phase_ == Phase::kSpin) {
      CpuRelax();
      if (polls_ % 16 != 0) return false;
      if (std::chrono::steady_clock::now() - start_ < policy_.spin) return false;
      phase_ = Phase::kYield;
      start_ = std::chrono::steady_clock::now();
      return false;
    }
    if (std::chrono::steady_clock::now() - start_ < policy_.yield_window) {
      sched_yield();
      return false;
    }
    return true;
  }

 private:
  enum class Phase { kSpin, kYield };
  WaitPolicy policy_;
  unsigned polls_ = 0;
  Phase phase_ = Phase::kSpin;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace korovod
