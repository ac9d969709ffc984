#include "common/byte_count.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

namespace korovod {

StatusOr<int64_t> ParseByteCount(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(s, &end, 10);
  if (end == s || errno != 0 || n < 0) {
    return InvalidArgument("expected a byte count >= 0 (e.g. 67108864 or 64M)");
  }
  const std::string suffix(end);
  int64_t mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KiB" || suffix == "k") {
    mult = int64_t{1} << 10;
  } else if (suffix == "M" || suffix == "MiB") {
    mult = int64_t{1} << 20;
  } else if (suffix == "G" || suffix == "GiB") {
    mult = int64_t{1} << 30;
  } else {
    return InvalidArgument("unknown unit '" + suffix + "' (use K, M or G)");
  }
  if (n > (int64_t{1} << 40) / mult) return InvalidArgument("larger than 1 TiB");
  return n * mult;
}

std::string FormatByteCount(int64_t bytes) {
  if (bytes > 0) {
    for (const auto& [shift, unit] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
      if (bytes % (int64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
    }
  }
  return std::to_string(bytes);
}

}  // namespace korovod
