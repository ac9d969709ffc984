// A memory file (memfd) shared with forked ranks: rank 0 appends its result lines (a forked
// korovod rank, or a peer process whose stdout is redirected here), the parent reads them once
// the ranks have exited. No temp file to clean up, and unlike a pipe it never fills up while the
// parent sleeps in the launcher.
#pragma once

#include <string>

#include "common/status.h"

namespace korovod::bench {

class ResultFile {
 public:
  static StatusOr<ResultFile> Create(const char* name);
  ~ResultFile();
  ResultFile(ResultFile&& other) noexcept;
  ResultFile& operator=(ResultFile&& other) noexcept;
  ResultFile(const ResultFile&) = delete;
  ResultFile& operator=(const ResultFile&) = delete;

  // Inherited by forked children (not close-on-exec, so a peer process can use it as stdout).
  int fd() const { return fd_; }
  // Appends `line` and a newline with one write(2) (the file offset is shared after fork).
  Status AppendLine(const std::string& line) const;
  // Everything written so far, from the start.
  StatusOr<std::string> ReadAll() const;
  // Empties the file for the next launch.
  Status Clear() const;

 private:
  explicit ResultFile(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace korovod::bench
