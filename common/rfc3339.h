// RFC 3339 timestamps in UTC ("2026-11-22T12:00:00Z", "2026-11-22T12:00:00.123456Z"): the one
// formatter and parser of the project. Kubernetes' metav1.Time is the 0-digit form, MicroTime the
// 6-digit one; log lines use 3 digits.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"

namespace korovod {

// `t` in UTC with `fractional_digits` (clamped to 0..9) digits after the seconds, truncated, not
// rounded, so a formatted time never lies in the future of `t`. 0 digits: no decimal point.
std::string FormatRfc3339(std::chrono::system_clock::time_point t, int fractional_digits = 0);

// "YYYY-MM-DDTHH:MM:SS" (a lowercase 't' too), optional fractional seconds of any length (kept to
// the nanosecond), then "Z"/"z" or a "+HH:MM"/"-HH:MM" offset; nothing else before or after.
// Rejects impossible dates ("2027-02-30") and out-of-range fields; a leap second (":60") reads
// as the first second of the next minute. The message quotes `text` and says what is wrong.
StatusOr<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text);

}  // namespace korovod
