#include "launcher/line_splitter.h"

namespace korovod::launcher {

void LineSplitter::Append(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      while (partial_.size() >= kMaxLine) {
        sink_(std::string_view(partial_).substr(0, kMaxLine));
        partial_.erase(0, kMaxLine);
      }
      return;
    }
    if (partial_.empty()) {
      sink_(bytes.substr(0, nl));
    } else {
      partial_.append(bytes.substr(0, nl));
      sink_(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

void LineSplitter::Flush() {
  if (partial_.empty()) return;
  std::string line;
  line.swap(partial_);
  sink_(line);
}

}  // namespace korovod::launcher
