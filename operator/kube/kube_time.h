// Kubernetes timestamps: metav1.Time is RFC 3339 in UTC to the second ("2026-11-22T12:00:00Z"),
// metav1.MicroTime to the microsecond ("2026-11-22T12:00:00.000000Z", used by Leases).
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace korovod::kube {

using Clock = std::chrono::system_clock;

std::string FormatTime(Clock::time_point t);
std::string FormatMicroTime(Clock::time_point t);
// Accepts both forms (any number of fractional digits) and a "Z" or "+hh:mm" offset.
StatusOr<Clock::time_point> ParseTime(const std::string& text);

}  // namespace korovod::kube
