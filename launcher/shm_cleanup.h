// ShmPrefixCleanup: on destruction (and on demand) unlinks every POSIX shared-memory segment whose
// name starts with the job's prefix, so segments left by killed children do not outlive the job.
#pragma once

#include <string>
#include <vector>

namespace korovod::launcher {

// Unlinks every /dev/shm entry whose name starts with `prefix` ("/korovod-<jobid>-"); returns the
// names it removed.
std::vector<std::string> UnlinkShmWithPrefix(const std::string& prefix);

class ShmPrefixCleanup {
 public:
  explicit ShmPrefixCleanup(std::string prefix) : prefix_(std::move(prefix)) {}
  ~ShmPrefixCleanup() { Run(); }
  ShmPrefixCleanup(const ShmPrefixCleanup&) = delete;
  ShmPrefixCleanup& operator=(const ShmPrefixCleanup&) = delete;

  const std::string& prefix() const { return prefix_; }
  std::vector<std::string> Run() { return UnlinkShmWithPrefix(prefix_); }

 private:
  std::string prefix_;
};

}  // namespace korovod::launcher
