// FdWriter: buffers whole prefixed lines for one output fd (korovodrun's stdout or stderr) and
// writes them out in large chunks. Only whole lines ever enter the buffer, so output from
// different processes never mixes inside a line. A closed reader (EPIPE) drops further output.
#pragma once

#include <string>
#include <string_view>

namespace korovod::launcher {

class FdWriter {
 public:
  explicit FdWriter(int fd) : fd_(fd) {}
  ~FdWriter() { Flush(); }
  FdWriter(const FdWriter&) = delete;
  FdWriter& operator=(const FdWriter&) = delete;

  // Queues prefix + line + '\n'; writes out when the buffer is large.
  void Line(std::string_view prefix, std::string_view line);
  // Writes everything queued (blocking until the fd takes it).
  void Flush();

 private:
  int fd_;
  bool broken_ = false;
  std::string buf_;
};

}  // namespace korovod::launcher
