// WaitPolicy: how a rank waits for a peer. Measured on 2-vCPU VMs: spinning wins while ranks fit
// on cores; oversubscribed, pure spinning collapses (ms per op) and pure blocking costs ~27-60 us
// per wake, so spin briefly, then yield for ~20 us, then block.
#pragma once

#include <sched.h>

#include <chrono>

namespace korovod {

struct WaitPolicy {
  int spin_iterations = 2000;                  // busy polls before yielding
  std::chrono::microseconds yield_window{20};  // sched_yield polls before blocking

  // `local_ranks` ranks share this host's cores.
  static WaitPolicy For(int local_ranks, int cores) {
    WaitPolicy p;
    if (local_ranks > cores) {
      p.spin_iterations = 0;  // another rank needs this core to make the progress we wait for
    }
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

// Tracks one idle period: spin, then yield, then tell the caller to block.
class IdleWaiter {
 public:
  explicit IdleWaiter(const WaitPolicy& p) : policy_(p) {}
  void Reset() { spins_ = 0; }
  // Returns true when the caller should block in the kernel.
  bool Pause() {
    if (spins_ < policy_.spin_iterations) {
      ++spins_;
      CpuRelax();
      return false;
    }
    if (spins_ == policy_.spin_iterations) {
      yield_start_ = std::chrono::steady_clock::now();
      ++spins_;
    }
    if (std::chrono::steady_clock::now() - yield_start_ < policy_.yield_window) {
      sched_yield();
      return false;
    }
    return true;
  }

 private:
  WaitPolicy policy_;
  int spins_ = 0;
  std::chrono::steady_clock::time_point yield_start_;
};

}  // namespace korovod
