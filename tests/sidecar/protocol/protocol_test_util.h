// Helpers shared by the sidecar protocol tests.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "sidecar/protocol/arena_layout.h"

namespace korovod::sidecar::testing {

// A shm name no other test (or concurrent ctest process) uses.
inline std::string UniqueArenaName(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "/korovod-test-" + std::to_string(::getpid()) + "-" + tag + "-" +
         std::to_string(counter++);
}

inline ArenaSizes SmallSizes(uint32_t slots = 8) {
  ArenaSizes s;
  s.submission_slots = slots;
  s.completion_slots = slots;
  s.client_heap_bytes = 64 << 10;
  s.result_heap_bytes = 64 << 10;
  return s;
}

// Waits for a forked child; its exit code, or 128 + signal.
inline int WaitChild(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace korovod::sidecar::testing
