// RFC 3339 <-> seconds since the epoch, as metav1.Time serializes ("2026-11-22T11:03:25Z"). The
// reconciler reads back the times it wrote (startTime, completionTime) to enforce the active
// deadline and the TTL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace korovod::op {

std::string FormatUnixRfc3339(int64_t unix_seconds);

// Accepts "YYYY-MM-DDTHH:MM:SS" with optional fractional seconds and "Z" or a "+HH:MM"/"-HH:MM"
// offset; nullopt for anything else.
std::optional<int64_t> ParseRfc3339(std::string_view text);

}  // namespace korovod::op
