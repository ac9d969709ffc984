#include "launcher/sidecar_log.h"

#include <cctype>

namespace korovod::launcher {

bool IsNotableSidecarLine(std::string_view line) {
  // The start-up summary (runtime/world/startup_summary.h): which interface and link rate each
  // rank ended up with is what a user needs first when a job is slow. It comes after the log
  // line's prefix (common/log.h); WARNING and ERROR lines match the words below.
  if (line.find("korovod: rank ") != std::string_view::npos) return true;
  // An elastic worker's place in each membership epoch.
  if (line.find("korovod: worker ") != std::string_view::npos) return true;
  std::string lower(line);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"error", "fail", "stall", "warn"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

SidecarLog::SidecarLog(const std::string& name, bool verbose, FdWriter* out)
    : prefix_("[sidecar " + name + "] "), verbose_(verbose), out_(out) {}

void SidecarLog::OnLine(std::string_view line) {
  bool show = verbose_ || IsNotableSidecarLine(line);
  if (show) out_->Line(prefix_, line);
  tail_.push_back({std::string(line), show});
  if (tail_.size() > kTailLines) tail_.pop_front();
}

size_t SidecarLog::PrintUnshownTail() {
  size_t printed = 0;
  for (Kept& k : tail_) {
    if (k.shown) continue;
    out_->Line(prefix_, k.line);
    k.shown = true;
    ++printed;
  }
  return printed;
}

}  // namespace korovod::launcher
