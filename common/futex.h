// Futex wait/wake on a 32-bit word in memory shared between processes (no FUTEX_PRIVATE_FLAG):
// the doorbells of the sidecar's arena queues and of the shm transport's rings. The one futex
// helper of the project.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace korovod {

// Sleeps while *word == expected, at most `timeout` (spurious and early returns are fine: callers
// re-check their condition in a loop). A timeout <= 0 returns at once.
inline void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
                      std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  const timespec ts{static_cast<time_t>(timeout.count() / 1000000000),
                    static_cast<long>(timeout.count() % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// Wakes up to `waiters` processes sleeping on `word`.
inline void FutexWake(std::atomic<uint32_t>& word, int waiters = INT_MAX) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, waiters, nullptr, nullptr,
            0);
}

}  // namespace korovod
