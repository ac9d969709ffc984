#include "runtime/core/stall_inspector.h"

#include <cstdio>

namespace korovod {
namespace {

// Durations between time points, in the settings' unit: comparing in milliseconds cannot
// overflow, whatever the configured times (converting those to nanoseconds could).
std::chrono::milliseconds Since(Clock::time_point now, Clock::time_point then) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - then);
}

}  // namespace

StallInspector::StallInspector(std::chrono::milliseconds check, std::chrono::milliseconds shutdown,
                               int set_id, int set_size)
    : check_(check), shutdown_(shutdown), set_id_(set_id), set_size_(set_size) {}

void StallInspector::Reported(const std::string& tensor, int set_rank, Clock::time_point now) {
  if (check_.count() == 0 && shutdown_.count() == 0) return;
  auto [it, inserted] = pending_.try_emplace(tensor);
  if (inserted) {
    it->second.first_seen = now;
    it->second.reported.assign(set_size_, false);
  }
  it->second.reported[set_rank] = true;
}

void StallInspector::Resolved(const std::string& tensor) { pending_.erase(tensor); }

std::optional<StallInspector::Finding> StallInspector::Check(
    Clock::time_point now, const std::function<std::string(int)>& describe,
    const std::vector<bool>& joined) {
  if (check_.count() == 0 && shutdown_.count() == 0) return std::nullopt;
  const auto threshold = check_.count() > 0 ? check_ : shutdown_;
  if (Since(now, last_report_) < threshold && !(shutdown_.count() > 0)) return std::nullopt;

  // missing[r]: the stalled tensors rank r has not submitted, with their age.
  std::vector<std::string> missing(set_size_);
  std::vector<bool> submitted_any(set_size_, false);
  int stalled = 0;
  bool shutdown = false;
  double oldest = 0;
  for (const auto& [name, p] : pending_) {
    const double age = std::chrono::duration<double>(now - p.first_seen).count();
    if (Since(now, p.first_seen) < threshold) continue;
    bool someone_missing = false;
    for (int r = 0; r < set_size_; ++r) {
      if (p.reported[r] || joined[r]) continue;
      someone_missing = true;
      char buf[64];
      std::snprintf(buf, sizeof(buf), " (%.1f s)", age);
      if (!missing[r].empty()) missing[r] += ", ";
      missing[r] += name + buf;
    }
    if (!someone_missing) continue;
    for (int r = 0; r < set_size_; ++r) {
      if (p.reported[r]) submitted_any[r] = true;
    }
    ++stalled;
    oldest = std::max(oldest, age);
    if (shutdown_.count() > 0 && Since(now, p.first_seen) >= shutdown_) shutdown = true;
  }
  if (stalled == 0) return std::nullopt;
  const bool due = check_.count() > 0 && Since(now, last_report_) >= check_;
  if (!due && !shutdown) return std::nullopt;
  last_report_ = now;

  char head[256];
  std::snprintf(head, sizeof(head),
                "stall: %d tensor%s submitted by some ranks of process set %d %s waited more than "
                "%.0f s for the other ranks (oldest %.1f s).",
                stalled, stalled == 1 ? "" : "s", set_id_, stalled == 1 ? "has" : "have",
                std::chrono::duration<double>(threshold).count(), oldest);
  Finding f;
  f.report = head;
  for (int r = 0; r < set_size_; ++r) {
    if (!missing[r].empty()) f.report += "\n  " + describe(r) + " has not submitted: " + missing[r];
  }
  std::string who;
  for (int r = 0; r < set_size_; ++r) {
    if (!submitted_any[r]) continue;
    if (!who.empty()) who += ", ";
    who += std::to_string(r);
  }
  f.report += "\n  submitted by set ranks: " + who +
              ". A rank that never submits a tensor the others do took another code path or ran "
              "out of data (use join).";
  f.shutdown = shutdown;
  return f;
}

}  // namespace korovod
