// SidecarLog: what korovodrun shows of one sidecar's output. Lines go to stderr as
// "[sidecar <name>] line" (the rank, or an elastic worker's id): all of them with --verbose,
// otherwise the start-up summary and those that mention "error", "fail", "stall" or "warn" (any
// case: the WARNING and ERROR log levels). The last 50 lines are kept so that when the sidecar
// fails the ones not yet shown can be printed.
#pragma once

#include <deque>
#include <string>
#include <string_view>

#include "launcher/fd_writer.h"

namespace korovod::launcher {

// Whether a sidecar line is shown without --verbose.
bool IsNotableSidecarLine(std::string_view line);

class SidecarLog {
 public:
  static constexpr size_t kTailLines = 50;

  SidecarLog(const std::string& name, bool verbose, FdWriter* out);

  void OnLine(std::string_view line);
  // Prints the kept lines not shown yet, oldest first; returns how many it printed.
  size_t PrintUnshownTail();

 private:
  struct Kept {
    std::string line;
    bool shown;
  };
  std::string prefix_;
  bool verbose_;
  FdWriter* out_;
  std::deque<Kept> tail_;
};

}  // namespace korovod::launcher
