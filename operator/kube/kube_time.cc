#include "operator/kube/kube_time.h"

#include <cctype>
#include <cstdio>
#include <ctime>

namespace korovod::kube {
namespace {

std::string Format(Clock::time_point t, bool micro) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  auto secs = std::chrono::floor<std::chrono::seconds>(us);
  const long long frac = (us - secs).count();
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  if (micro) {
    std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
  } else {
    std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  }
  return buf;
}

}  // namespace

std::string FormatTime(Clock::time_point t) { return Format(t, false); }
std::string FormatMicroTime(Clock::time_point t) { return Format(t, true); }

StatusOr<Clock::time_point> ParseTime(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return InvalidArgument("time \"" + text + "\": not RFC 3339");
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto t = Clock::from_time_t(timegm(&tm));
  size_t i = static_cast<size_t>(consumed);
  if (i < text.size() && text[i] == '.') {
    long long us = 0;
    int digits = 0;
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (digits < 6) {
        us = us * 10 + (text[i] - '0');
        ++digits;
      }
    }
    while (digits++ < 6) us *= 10;
    t += std::chrono::microseconds(us);
  }
  if (i < text.size() && (text[i] == 'Z' || text[i] == 'z')) return t;
  int oh = 0, om = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-') &&
      std::sscanf(text.c_str() + i + 1, "%2d:%2d", &oh, &om) == 2) {
    const auto offset = std::chrono::hours(oh) + std::chrono::minutes(om);
    return text[i] == '+' ? t - offset : t + offset;
  }
  return InvalidArgument("time \"" + text + "\": no time zone");
}

}  // namespace korovod::kube
