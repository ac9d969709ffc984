// EnvSettings: the one way korovod processes read settings from the environment. Typed getters
// parse and validate; a bad value is InvalidArgument naming the variable and the value
// ("KOROVOD_CYCLE_TIME=abc: expected milliseconds > 0"), never a silent default. A variable that
// is set and changes a default is logged once per process at info level, so a job's log says
// which settings were not the defaults (the first thing to ask when two runs differ).
//
// Unset and empty are the same (an empty `env:` entry in a pod spec means "not set"). With
// WithFallbackPrefix("KOROVOD_", "HOROVOD_") a KOROVOD_X getter also reads HOROVOD_X when
// KOROVOD_X is unset (existing Horovod job specs keep working); errors name the one read.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace korovod {

using Getenv = std::function<std::optional<std::string>(const std::string&)>;

// std::getenv as a Getenv.
Getenv ProcessGetenv();

class EnvSettings {
 public:
  // `subsystem`: the subsystem overrides are logged under (the reader's owner).
  EnvSettings(Getenv getenv, logging::Subsystem subsystem);

  // Names starting with `prefix` also read `fallback` + the rest when unset.
  EnvSettings& WithFallbackPrefix(std::string prefix, std::string fallback);

  struct Found {
    std::string name;   // the variable the value came from (the fallback's when it was)
    std::string value;  // never empty
  };
  // The raw value, or nullopt when unset or empty. Logs nothing.
  std::optional<Found> Find(std::string_view name) const;

  StatusOr<std::string> String(std::string_view name, std::string_view fallback = "") const;
  // Unset or empty: InvalidArgument "NAME is not set".
  StatusOr<std::string> RequiredString(std::string_view name) const;

  // A decimal integer in [min, max].
  StatusOr<int64_t> Int(std::string_view name, int64_t fallback, int64_t min, int64_t max) const;
  StatusOr<int64_t> RequiredInt(std::string_view name, int64_t min, int64_t max) const;

  // A finite decimal number in [min, max]; `expected` is the error's wording.
  StatusOr<double> Number(std::string_view name, double fallback, double min, double max,
                          std::string_view expected) const;

  // 1/0, true/false, yes/no, on/off (any case).
  StatusOr<bool> Bool(std::string_view name, bool fallback) const;

  // A byte count in common/byte_count.h's syntax ("64M", "1048576").
  StatusOr<int64_t> Bytes(std::string_view name, int64_t fallback) const;

  // Seconds as a decimal number ("0.5", "60"): 0, or in [0.001, max_seconds].
  StatusOr<std::chrono::milliseconds> Seconds(std::string_view name,
                                              std::chrono::milliseconds fallback,
                                              double max_seconds = 1e9) const;

  // One of `choices` (exact match).
  StatusOr<std::string> Choice(std::string_view name, std::string_view fallback,
                               std::initializer_list<std::string_view> choices) const;

  // Items separated by `separator`, each trimmed of blanks, empty items dropped.
  StatusOr<std::vector<std::string>> List(std::string_view name,
                                          const std::vector<std::string>& fallback,
                                          char separator = ',') const;

  // Logs "NAME=value (default D)" once per process and variable. Getters call it; readers that
  // parse a value themselves (host:port lists) call it after they accepted the value.
  void NoteOverride(const Found& found, std::string_view default_text) const;

 private:
  Status Bad(const Found& found, std::string_view expected) const;

  Getenv getenv_;
  logging::Subsystem subsystem_;
  std::string prefix_;
  std::string fallback_prefix_;
};

// For tests: forget which overrides were logged.
void ResetLoggedOverridesForTest();

}  // namespace korovod
