// The one logging facility of every korovod process (sidecar, engine, korovodrun, operator,
// bench, korovod-timeline). Each line is
//
//   2026-11-25T07:49:50.123Z WARNING [rank 3] world: KOROVOD_IFACE=eth1 ignored: ...
//
// RFC 3339 UTC time with milliseconds, level, the process role set once at start (`rank 3`,
// `korovodrun`, `korovod-operator`; left out until set) and the subsystem. Why one format: a
// job's lines from many processes and ranks end up in one place (korovodrun's terminal, a log
// aggregator), and they must sort by time and filter by rank and subsystem there.
//
// Filtering: KOROVOD_LOG_LEVEL (trace, debug, info, warning, error; default info) and
// KOROVOD_LOG_SUBSYSTEMS (comma list of subsystem names; default all), read by
// ConfigureFromEnvironment(). Lines are whole and never interleave: each is one write(2) on
// stderr (or one call of the sink a process installs, e.g. korovodrun's ordered stderr writer).
//
//   KV_LOG(kWarning, kWorld, "KOROVOD_IFACE=%s ignored", iface.c_str());
//
// The format string is checked at compile time (printf attribute); arguments are not evaluated
// when the level or subsystem is filtered out.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace korovod::logging {

enum class Level : uint8_t { kTrace, kDebug, kInfo, kWarning, kError };

enum class Subsystem : uint8_t {
  kEngine,
  kTransport,
  kWorld,
  kSidecar,
  kArena,
  kLauncher,
  kOperator,
  kWebhook,
  kBench,
  kTimeline,
  kAutotune,
};
inline constexpr int kSubsystemCount = static_cast<int>(Subsystem::kAutotune) + 1;

inline constexpr char kLogLevelVariable[] = "KOROVOD_LOG_LEVEL";
inline constexpr char kLogSubsystemsVariable[] = "KOROVOD_LOG_SUBSYSTEMS";

// "TRACE", "DEBUG", "INFO", "WARNING", "ERROR": upper case so that a level stands out in a line.
std::string_view LevelName(Level level);
// "engine", "transport", ...: the names KOROVOD_LOG_SUBSYSTEMS takes.
std::string_view SubsystemName(Subsystem subsystem);
// Case-insensitive; "warn" is accepted for "warning".
StatusOr<Level> ParseLevel(std::string_view text);
StatusOr<Subsystem> ParseSubsystem(std::string_view text);

// The process role in every line ("rank 3", "korovodrun", "korovod-operator"). Set once at
// start, before other threads log.
void SetRole(std::string role);

void SetLevel(Level level);
Level level();
// Which subsystems log: bit (1 << subsystem). All by default.
void SetSubsystemMask(uint32_t mask);
inline constexpr uint32_t kAllSubsystems = (1u << kSubsystemCount) - 1;

using Getenv = std::function<std::optional<std::string>(const std::string&)>;
// Reads KOROVOD_LOG_LEVEL and KOROVOD_LOG_SUBSYSTEMS through `getenv` and applies them. A bad
// value leaves that setting as it was and returns InvalidArgument naming the variable, the value
// and the accepted ones; the caller logs it as a warning and goes on (a typo in a log setting
// must not stop a training job).
Status Configure(const Getenv& getenv);
// Configure() with the process environment; logs a bad value as a warning of `subsystem` (the
// process's own), shown whatever the filter.
void ConfigureFromEnvironment(Subsystem subsystem);

// Where lines go: one call per whole line (without its '\n'). Empty: stderr, one write(2) per
// line. Calls are serialized.
using Sink = std::function<void(std::string_view line)>;
void SetSink(Sink sink);

// Restores the defaults (level info, all subsystems, no role, stderr): for tests.
void ResetForTest();

inline bool Enabled(Level level, Subsystem subsystem);

// One line, if enabled.
void Log(Level level, Subsystem subsystem, std::string_view message);
void Logf(Level level, Subsystem subsystem, const char* format, ...)
    __attribute__((format(printf, 3, 4)));
// One line whatever the filter: for what must always be seen.
void Emit(Level level, Subsystem subsystem, std::string_view message);

// The line as Log writes it (no '\n'); the time is common/rfc3339.h's, with milliseconds.
std::string FormatLine(std::chrono::system_clock::time_point time, Level level,
                       std::string_view role, Subsystem subsystem, std::string_view message);

namespace internal {
extern uint8_t g_level;
extern uint32_t g_subsystems;
}  // namespace internal

inline bool Enabled(Level level, Subsystem subsystem) {
  // Plain loads of bytes set at start: the filter is read on every log call, so it stays cheap.
  return static_cast<uint8_t>(level) >= __atomic_load_n(&internal::g_level, __ATOMIC_RELAXED) &&
         (__atomic_load_n(&internal::g_subsystems, __ATOMIC_RELAXED) &
          (1u << static_cast<unsigned>(subsystem))) != 0;
}

}  // namespace korovod::logging

// KV_LOG(kInfo, kWorld, "format", args...): logs when level and subsystem are enabled.
#define KV_LOG(level, subsystem, ...)                                                  \
  do {                                                                                 \
    if (::korovod::logging::Enabled(::korovod::logging::Level::level,                  \
                                    ::korovod::logging::Subsystem::subsystem)) {       \
      ::korovod::logging::Logf(::korovod::logging::Level::level,                       \
                               ::korovod::logging::Subsystem::subsystem, __VA_ARGS__); \
    }                                                                                  \
  } while (0)

// KV_LOG_AT(level, subsystem, "format", args...): the same with run-time values.
#define KV_LOG_AT(level, subsystem, ...)                                       \
  do {                                                                         \
    const ::korovod::logging::Level kv_log_level_ = (level);                   \
    const ::korovod::logging::Subsystem kv_log_subsystem_ = (subsystem);       \
    if (::korovod::logging::Enabled(kv_log_level_, kv_log_subsystem_)) {       \
      ::korovod::logging::Logf(kv_log_level_, kv_log_subsystem_, __VA_ARGS__); \
    }                                                                          \
  } while (0)
