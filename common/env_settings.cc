#include "common/env_settings.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "common/byte_count.h"

namespace korovod {
namespace {

struct LoggedOverrides {
  std::mutex mu;
  std::set<std::string, std::less<>> names;
};

LoggedOverrides& logged() {
  static LoggedOverrides* l = new LoggedOverrides();  // never destroyed (threads may log late)
  return *l;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Shortest text that reads back as `d` (no trailing zeros): "1", "0.5", "60".
std::string NumberText(double d) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

StatusOr<double> ParseDouble(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || errno != 0 || !std::isfinite(d)) {
    return InvalidArgument("not a number");
  }
  return d;
}

}  // namespace

Getenv ProcessGetenv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

void ResetLoggedOverridesForTest() {
  LoggedOverrides& l = logged();
  std::lock_guard<std::mutex> lock(l.mu);
  l.names.clear();
}

EnvSettings::EnvSettings(Getenv getenv, logging::Subsystem subsystem)
    : getenv_(std::move(getenv)), subsystem_(subsystem) {}

EnvSettings& EnvSettings::WithFallbackPrefix(std::string prefix, std::string fallback) {
  prefix_ = std::move(prefix);
  fallback_prefix_ = std::move(fallback);
  return *this;
}

std::optional<EnvSettings::Found> EnvSettings::Find(std::string_view name) const {
  std::string n(name);
  if (auto v = getenv_(n); v.has_value() && !v->empty()) return Found{std::move(n), *v};
  if (!prefix_.empty() && name.starts_with(prefix_)) {
    std::string alt = fallback_prefix_ + std::string(name.substr(prefix_.size()));
    if (auto v = getenv_(alt); v.has_value() && !v->empty()) return Found{std::move(alt), *v};
  }
  return std::nullopt;
}

Status EnvSettings::Bad(const Found& found, std::string_view expected) const {
  return InvalidArgument(found.name + "=" + found.value + ": " + std::string(expected));
}

void EnvSettings::NoteOverride(const Found& found, std::string_view default_text) const {
  {
    LoggedOverrides& l = logged();
    std::lock_guard<std::mutex> lock(l.mu);
    if (!l.names.insert(found.name).second) return;
  }
  if (default_text.empty()) {
    KV_LOG_AT(logging::Level::kInfo, subsystem_, "%s=%s (default unset)", found.name.c_str(),
              found.value.c_str());
  } else {
    KV_LOG_AT(logging::Level::kInfo, subsystem_, "%s=%s (default %.*s)", found.name.c_str(),
              found.value.c_str(), static_cast<int>(default_text.size()), default_text.data());
  }
}

StatusOr<std::string> EnvSettings::String(std::string_view name, std::string_view fallback) const {
  std::optional<Found> f = Find(name);
  if (!f) return std::string(fallback);
  if (f->value != fallback) NoteOverride(*f, fallback);
  return f->value;
}

StatusOr<std::string> EnvSettings::RequiredString(std::string_view name) const {
  std::optional<Found> f = Find(name);
  if (!f) return InvalidArgument(std::string(name) + " is not set");
  return f->value;
}

namespace {

StatusOr<int64_t> ParseInt(std::string_view text, int64_t min, int64_t max) {
  const std::string_view t = Trim(text);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v < min || v > max) {
    return InvalidArgument("expected an integer in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  return v;
}

}  // namespace

StatusOr<int64_t> EnvSettings::Int(std::string_view name, int64_t fallback, int64_t min,
                                   int64_t max) const {
  std::optional<Found> f = Find(name);
  if (!f) return fallback;
  StatusOr<int64_t> v = ParseInt(f->value, min, max);
  if (!v.ok()) return Bad(*f, v.status().message());
  if (*v != fallback) NoteOverride(*f, std::to_string(fallback));
  return *v;
}

StatusOr<int64_t> EnvSettings::RequiredInt(std::string_view name, int64_t min, int64_t max) const {
  std::optional<Found> f = Find(name);
  if (!f) return InvalidArgument(std::string(name) + " is not set");
  StatusOr<int64_t> v = ParseInt(f->value, min, max);
  if (!v.ok()) return Bad(*f, v.status().message());
  return *v;
}

StatusOr<double> EnvSettings::Number(std::string_view name, double fallback, double min, double max,
                                     std::string_view expected) const {
  std::optional<Found> f = Find(name);
  if (!f) return fallback;
  StatusOr<double> d = ParseDouble(Trim(f->value));
  if (!d.ok() || *d < min || *d > max) return Bad(*f, expected);
  if (*d != fallback) NoteOverride(*f, NumberText(fallback));
  return *d;
}

StatusOr<bool> EnvSettings::Bool(std::string_view name, bool fallback) const {
  std::optional<Found> f = Find(name);
  if (!f) return fallback;
  const std::string v = Lower(Trim(f->value));
  bool b;
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    b = true;
  } else if (v == "0" || v == "false" || v == "no" || v == "off") {
    b = false;
  } else {
    return Bad(*f, "expected 1 or 0 (true/false)");
  }
  if (b != fallback) NoteOverride(*f, fallback ? "1" : "0");
  return b;
}

StatusOr<int64_t> EnvSettings::Bytes(std::string_view name, int64_t fallback) const {
  std::optional<Found> f = Find(name);
  if (!f) return fallback;
  StatusOr<int64_t> bytes = ParseByteCount(std::string(Trim(f->value)));
  if (!bytes.ok()) return Bad(*f, bytes.status().message());
  if (*bytes != fallback) NoteOverride(*f, std::to_string(fallback));
  return *bytes;
}

StatusOr<std::chrono::milliseconds> EnvSettings::Seconds(std::string_view name,
                                                         std::chrono::milliseconds fallback,
                                                         double max_seconds) const {
  std::optional<Found> f = Find(name);
  if (!f) return fallback;
  const std::string expected =
      "expected 0 (off) or seconds in [0.001, " + NumberText(max_seconds) + "]";
  StatusOr<double> d = ParseDouble(Trim(f->value));
  if (!d.ok() || *d < 0 || *d > max_seconds || (*d > 0 && *d < 0.001)) return Bad(*f, expected);
  const std::chrono::milliseconds ms(static_cast<int64_t>(std::llround(*d * 1000)));
  if (ms != fallback) NoteOverride(*f, NumberText(fallback.count() / 1000.0));
  return ms;
}

StatusOr<std::string> EnvSettings::Choice(std::string_view name, std::string_view fallback,
                                          std::initializer_list<std::string_view> choices) const {
  std::optional<Found> f = Find(name);
  if (!f) return std::string(fallback);
  const std::string_view v = Trim(f->value);
  for (std::string_view c : choices) {
    if (v == c) {
      if (v != fallback) NoteOverride(*f, fallback);
      return std::string(c);
    }
  }
  std::string expected = "expected one of";
  for (std::string_view c : choices) expected += " " + std::string(c) + ",";
  expected.pop_back();
  return Bad(*f, expected);
}

StatusOr<std::vector<std::string>> EnvSettings::List(std::string_view name,
                                                     const std::vector<std::string>& fallback,
                                                     char separator) const {
  std::optional<Found> f = Find(name);
  if (!f) return fallback;
  std::vector<std::string> items;
  std::string_view rest = f->value;
  while (true) {
    const size_t cut = rest.find(separator);
    const std::string_view item = Trim(rest.substr(0, cut));
    if (!item.empty()) items.emplace_back(item);
    if (cut == std::string_view::npos) break;
    rest.remove_prefix(cut + 1);
  }
  if (items != fallback) {
    std::string text;
    for (const std::string& s : fallback)
      text += (text.empty() ? "" : std::string(1, separator)) + s;
    NoteOverride(*f, text);
  }
  return items;
}

}  // namespace korovod
