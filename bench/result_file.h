// A memory file (memfd) shared with forked ranks: rank 0 appends its result lines (a forked
// korovod rank, or a peer process whose stdout is redirected here), the parent reads them once
// the ranks have exited. No temp file to clean up, and unlike a pipe it never fills up while the
// parent sleeps in the launcher.
#pragma once

#include <string>

#include "common/fd.h"
#include "common/status.h"

namespace korovod::bench {

class ResultFile {
 public:
  static StatusOr<ResultFile> Create(const char* name);

  // Inherited by forked children (not close-on-exec, so a peer process can use it as stdout).
  int fd() const { return fd_.get(); }
  // Appends `line` and a newline with one write(2) (the file offset is shared after fork).
  Status AppendLine(const std::string& line) const;
  // Everything written so far, from the start.
  StatusOr<std::string> ReadAll() const;
  // Empties the file for the next launch.
  Status Clear() const;

 private:
  explicit ResultFile(int fd) : fd_(fd) {}
  Fd fd_;
};

}  // namespace korovod::bench
