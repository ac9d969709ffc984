#include "operator/controller/time_format.h"

#include <chrono>
#include <cstdio>

#include "operator/api/conditions.h"

namespace korovod::op {
namespace {

bool Digits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

}  // namespace

std::string FormatUnixRfc3339(int64_t unix_seconds) {
  return FormatRfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds)));
}

std::optional<int64_t> ParseRfc3339(std::string_view s) {
  int year, month, day, hour, minute, second;
  if (!Digits(s, 0, 4, year) || s.size() < 19 || s[4] != '-' || !Digits(s, 5, 2, month) ||
      s[7] != '-' || !Digits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't') ||
      !Digits(s, 11, 2, hour) || s[13] != ':' || !Digits(s, 14, 2, minute) || s[16] != ':' ||
      !Digits(s, 17, 2, second)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  size_t pos = 19;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    const size_t start = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    if (pos == start) return std::nullopt;
  }
  int64_t offset = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!Digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !Digits(s, pos + 4, 2, om)) {
      return std::nullopt;
    }
    offset = (s[pos] == '+' ? 1 : -1) * (int64_t{oh} * 3600 + int64_t{om} * 60);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  const auto date = std::chrono::year{year} / std::chrono::month{static_cast<unsigned>(month)} /
                    std::chrono::day{static_cast<unsigned>(day)};
  if (!date.ok()) return std::nullopt;
  const int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  return days * 86400 + int64_t{hour} * 3600 + int64_t{minute} * 60 + second - offset;
}

}  // namespace korovod::op
