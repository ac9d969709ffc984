#include "common/log.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/rfc3339.h"

namespace korovod::logging {
namespace internal {
uint8_t g_level = static_cast<uint8_t>(Level::kInfo);
uint32_t g_subsystems = kAllSubsystems;
}  // namespace internal

namespace {

constexpr std::array<std::string_view, 5> kLevelNames = {"TRACE", "DEBUG", "INFO", "WARNING",
                                                         "ERROR"};
constexpr std::array<std::string_view, kSubsystemCount> kSubsystemNames = {
    "engine",   "transport", "world", "sidecar",  "arena",   "launcher",
    "operator", "webhook",   "bench", "timeline", "autotune"};

// Role and sink change rarely (start-up, tests); a mutex keeps them and the sink's calls simple.
struct State {
  std::mutex mu;
  std::string role;
  Sink sink;
};

State& state() {
  static State* s = new State();  // never destroyed: threads may log during static destruction
  return *s;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Joined(const auto& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    for (char c : n) out += Lower(c);
  }
  return out;
}

// One write(2) per line: concurrent writers (threads, and the other processes sharing the same
// stderr pipe) never split a line. A partial write, rare on pipes below PIPE_BUF, is finished.
void WriteStderr(std::string_view line) {
  std::string buf;
  buf.reserve(line.size() + 1);
  buf.append(line);
  buf.push_back('\n');
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::write(STDERR_FILENO, buf.data() + done, buf.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report it
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string_view LevelName(Level level) { return kLevelNames[static_cast<size_t>(level)]; }

std::string_view SubsystemName(Subsystem subsystem) {
  return kSubsystemNames[static_cast<size_t>(subsystem)];
}

StatusOr<Level> ParseLevel(std::string_view text) {
  const std::string_view t = Trim(text);
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (EqualsIgnoreCase(t, kLevelNames[i])) return static_cast<Level>(i);
  }
  if (EqualsIgnoreCase(t, "warn")) return Level::kWarning;
  return InvalidArgument(std::string(kLogLevelVariable) + "=" + std::string(text) +
                         ": expected one of " + Joined(kLevelNames));
}

StatusOr<Subsystem> ParseSubsystem(std::string_view text) {
  const std::string_view t = Trim(text);
  for (size_t i = 0; i < kSubsystemNames.size(); ++i) {
    if (EqualsIgnoreCase(t, kSubsystemNames[i])) return static_cast<Subsystem>(i);
  }
  return InvalidArgument("unknown subsystem \"" + std::string(t) + "\": expected one of " +
                         Joined(kSubsystemNames));
}

void SetRole(std::string role) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.role = std::move(role);
}

void SetLevel(Level level) {
  __atomic_store_n(&internal::g_level, static_cast<uint8_t>(level), __ATOMIC_RELAXED);
}

Level level() { return static_cast<Level>(__atomic_load_n(&internal::g_level, __ATOMIC_RELAXED)); }

void SetSubsystemMask(uint32_t mask) {
  __atomic_store_n(&internal::g_subsystems, mask & kAllSubsystems, __ATOMIC_RELAXED);
}

Status Configure(const Getenv& getenv) {
  Status first = OkStatus();
  if (auto v = getenv(kLogLevelVariable); v.has_value() && !Trim(*v).empty()) {
    StatusOr<Level> parsed = ParseLevel(*v);
    if (parsed.ok()) {
      SetLevel(*parsed);
    } else {
      first = parsed.status();
    }
  }
  if (auto v = getenv(kLogSubsystemsVariable); v.has_value() && !Trim(*v).empty()) {
    uint32_t mask = 0;
    Status bad = OkStatus();
    std::string_view rest = *v;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = Trim(rest.substr(0, comma));
      if (!item.empty()) {
        StatusOr<Subsystem> sub = ParseSubsystem(item);
        if (!sub.ok()) {
          bad = InvalidArgument(std::string(kLogSubsystemsVariable) + "=" + *v + ": " +
                                sub.status().message());
          break;
        }
        mask |= 1u << static_cast<unsigned>(*sub);
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (bad.ok()) {
      SetSubsystemMask(mask);
    } else if (first.ok()) {
      first = bad;
    }
  }
  return first;
}

void ConfigureFromEnvironment(Subsystem subsystem) {
  Status s = Configure([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
  // Always shown (whatever the level and subsystems): the user asked for a setting that did not
  // take, and must learn which one.
  if (!s.ok()) Emit(Level::kWarning, subsystem, s.message() + "; ignored");
}

void SetSink(Sink sink) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(sink);
}

void ResetForTest() {
  SetLevel(Level::kInfo);
  SetSubsystemMask(kAllSubsystems);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.role.clear();
  s.sink = nullptr;
}

std::string FormatLine(std::chrono::system_clock::time_point time, Level level,
                       std::string_view role, Subsystem subsystem, std::string_view message) {
  std::string line = FormatRfc3339(time, 3);
  line += ' ';
  line += LevelName(level);
  if (!role.empty()) {
    line += " [";
    line += role;
    line += ']';
  }
  line += ' ';
  line += SubsystemName(subsystem);
  line += ": ";
  line += message;
  return line;
}

void Log(Level level, Subsystem subsystem, std::string_view message) {
  if (Enabled(level, subsystem)) Emit(level, subsystem, message);
}

void Emit(Level level, Subsystem subsystem, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string line = FormatLine(now, level, s.role, subsystem, message);
  if (s.sink) {
    s.sink(line);
  } else {
    WriteStderr(line);
  }
}

void Logf(Level level, Subsystem subsystem, const char* format, ...) {
  if (!Enabled(level, subsystem)) return;
  char small[1024];
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  if (n < 0) {
    va_end(copy);
    return;
  }
  if (static_cast<size_t>(n) < sizeof(small)) {
    va_end(copy);
    Log(level, subsystem, std::string_view(small, static_cast<size_t>(n)));
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(big.data(), big.size(), format, copy);
  va_end(copy);
  big.resize(static_cast<size_t>(n));
  Log(level, subsystem, big);
}

}  // namespace korovod::logging
