#include "common/rfc3339.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace korovod {
namespace {

using Clock = std::chrono::system_clock;

// Reads `n` decimal digits at `pos` into `out`; false when `s` is too short or one is not a digit.
bool Digits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

Status Bad(std::string_view text, const char* why) {
  return InvalidArgument("time \"" + std::string(text) + "\" is not RFC 3339 (" + why +
                         "; want e.g. 2026-11-22T12:00:00Z)");
}

}  // namespace

std::string FormatRfc3339(Clock::time_point t, int fractional_digits) {
  using std::chrono::days;
  using std::chrono::floor;
  using std::chrono::nanoseconds;
  const int digits = std::clamp(fractional_digits, 0, 9);
  // Calendar arithmetic in <chrono>: no gmtime_r, no time_t range limits, floors before 1970.
  const auto day = floor<days>(t);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss hms{floor<nanoseconds>(t - day)};
  char buf[64];
  int n =
      std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02d:%02d:%02d", static_cast<int>(ymd.year()),
                    static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                    static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                    static_cast<int>(hms.seconds().count()));
  std::string out(buf, static_cast<size_t>(n));
  if (digits > 0) {
    int64_t frac = hms.subseconds().count();  // nanoseconds
    for (int i = digits; i < 9; ++i) frac /= 10;
    n = std::snprintf(buf, sizeof(buf), ".%0*lld", digits, static_cast<long long>(frac));
    out.append(buf, static_cast<size_t>(n));
  }
  out += 'Z';
  return out;
}

StatusOr<Clock::time_point> ParseRfc3339(std::string_view s) {
  int year, month, day, hour, minute, second;
  if (!Digits(s, 0, 4, year) || s.size() < 19 || s[4] != '-' || !Digits(s, 5, 2, month) ||
      s[7] != '-' || !Digits(s, 8, 2, day) || (s[10] != 'T' && s[10] != 't') ||
      !Digits(s, 11, 2, hour) || s[13] != ':' || !Digits(s, 14, 2, minute) || s[16] != ':' ||
      !Digits(s, 17, 2, second)) {
    return Bad(s, "not YYYY-MM-DDTHH:MM:SS");
  }
  const auto date = std::chrono::year{year} / std::chrono::month{static_cast<unsigned>(month)} /
                    std::chrono::day{static_cast<unsigned>(day)};
  if (!date.ok()) return Bad(s, "no such date");
  if (hour > 23 || minute > 59 || second > 60) return Bad(s, "time of day out of range");
  size_t pos = 19;
  int64_t nanos = 0;
  if (pos < s.size() && s[pos] == '.') {
    const size_t start = ++pos;
    int kept = 0;
    for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos) {
      if (kept < 9) {  // finer than the clock: dropped
        nanos = nanos * 10 + (s[pos] - '0');
        ++kept;
      }
    }
    if (pos == start) return Bad(s, "no digits after the decimal point");
    for (; kept < 9; ++kept) nanos *= 10;
  }
  int64_t offset_minutes = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!Digits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !Digits(s, pos + 4, 2, om) || oh > 23 || om > 59) {
      return Bad(s, "offset is not +HH:MM or -HH:MM");
    }
    offset_minutes = (s[pos] == '+' ? 1 : -1) * (int64_t{oh} * 60 + om);
    pos += 6;
  } else {
    return Bad(s, "no time zone: want Z or +HH:MM");
  }
  if (pos != s.size()) return Bad(s, "trailing characters");
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::sys_days(date).time_since_epoch() + std::chrono::hours(hour) +
      std::chrono::minutes(minute - offset_minutes) + std::chrono::seconds(second) +
      std::chrono::nanoseconds(nanos)));
}

}  // namespace korovod
