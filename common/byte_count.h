// Byte counts as korovod's settings write them: an integer with an optional binary unit.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace korovod {

// "67108864", "64M", "64MiB", "512K", "1G", "10B": K/k/KiB, M/MiB, G/GiB are binary units; at most
// 1 TiB. The error's message says what was expected; callers name the setting and the value.
// The one parser behind KOROVOD_FUSION_THRESHOLD (and the other byte variables) and the
// injection webhook's korovod.dev/fusion-threshold-bytes, so both accept the same text.
StatusOr<int64_t> ParseByteCount(const std::string& text);

// `bytes` in the largest of G, M, K that divides it exactly, else plain ("64M", "1536K", "1000"),
// so ParseByteCount(FormatByteCount(n)) == n for 0 <= n <= 1 TiB: messages quote a setting in the
// form a user would write it. Negative counts are formatted plain.
std::string FormatByteCount(int64_t bytes);

}  // namespace korovod
