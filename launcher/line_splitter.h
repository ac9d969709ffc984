// LineSplitter: bytes from a pipe in, whole lines out. A line longer than kMaxLine is cut into
// kMaxLine pieces so one process printing without newlines cannot grow memory without bound.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace korovod::launcher {

class LineSplitter {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;
  using Sink = std::function<void(std::string_view line)>;  // the line without its '\n'

  explicit LineSplitter(Sink sink) : sink_(std::move(sink)) {}

  void Append(std::string_view bytes);
  // Emits a pending partial line (no trailing newline seen), if any.
  void Flush();
  bool has_partial() const { return !partial_.empty(); }

 private:
  Sink sink_;
  std::string partial_;
};

}  // namespace korovod::launcher
