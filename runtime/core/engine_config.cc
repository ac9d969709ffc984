#include "runtime/core/engine_config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/byte_count.h"

namespace korovod {
namespace {

const char* const kPrefix = "KOROVOD_";

using Getenv = std::function<std::optional<std::string>(const std::string&)>;

// KOROVOD_<key>, else HOROVOD_<key>. Returns the value and the name it came from.
std::optional<std::pair<std::string, std::string>> Lookup(const Getenv& getenv,
                                                          const std::string& key) {
  for (const char* prefix : {kPrefix, "HOROVOD_"}) {
    std::string name = std::string(prefix) + key;
    if (auto v = getenv(name); v.has_value() && !v->empty()) return std::make_pair(*v, name);
  }
  return std::nullopt;
}

Status Bad(const std::string& name, const std::string& value, const std::string& expected) {
  return InvalidArgument(name + "=" + value + ": " + expected);
}

StatusOr<int64_t> ParseBytes(const std::string& name, const std::string& v) {
  StatusOr<int64_t> bytes = ParseByteCount(v);
  if (!bytes.ok()) return Bad(name, v, bytes.status().message());
  return *bytes;
}

StatusOr<double> ParseNumber(const std::string& name, const std::string& v,
                             const std::string& expected) {
  const char* s = v.c_str();
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !std::isfinite(d)) return Bad(name, v, expected);
  return d;
}

StatusOr<int> ParseInt(const std::string& name, const std::string& v, int min) {
  const std::string expected = "expected an integer >= " + std::to_string(min);
  KV_ASSIGN_OR_RETURN(double d, ParseNumber(name, v, expected));
  if (d != std::floor(d) || d < min || d > 1e9) return Bad(name, v, expected);
  return static_cast<int>(d);
}

StatusOr<bool> ParseBool(const std::string& name, const std::string& v) {
  if (v == "1" || v == "true" || v == "TRUE" || v == "True" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "FALSE" || v == "False" || v == "no" || v == "off") {
    return false;
  }
  return Bad(name, v, "expected 1 or 0 (true/false)");
}

StatusOr<std::chrono::milliseconds> ParseSeconds(const std::string& name, const std::string& v) {
  const char* expected = "expected 0 (off) or seconds in [0.001, 1e9]";
  KV_ASSIGN_OR_RETURN(double d, ParseNumber(name, v, expected));
  if (d < 0 || d > 1e9 || (d > 0 && d < 0.001)) return Bad(name, v, expected);
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(d * 1000)));
}

}  // namespace

const std::vector<EngineVariable>& EngineVariables() {
  static const std::vector<EngineVariable> vars = {
      {"KOROVOD_FUSION_THRESHOLD", "64M",
       "Tensor Fusion buffer size in bytes (suffix K/M/G allowed); 0 disables fusion"},
      {"KOROVOD_FUSION_TENSOR_MAX", "1M",
       "tensors of at least this many bytes run alone, in place, never copied into the fusion "
       "buffer; 0: no limit"},
      {"KOROVOD_CYCLE_TIME", "1", "background cycle time in milliseconds (> 0)"},
      {"KOROVOD_CACHE_CAPACITY", "1024", "response cache entries; 0 disables the cache"},
      {"KOROVOD_STALL_CHECK_TIME_SECONDS", "60",
       "report tensors submitted by some ranks but not others after this long; 0 disables"},
      {"KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0",
       "fail the job with the stall report after this long (> check time); 0: never"},
      {"KOROVOD_TIMELINE", "",
       "timeline file; \"{rank}\" in the path makes every rank record, otherwise rank 0 only"},
      {"KOROVOD_TIMELINE_MARK_CYCLES", "0", "1: mark every engine cycle in the timeline"},
      {"KOROVOD_AUTOTUNE", "0", "1: search fusion threshold, cycle time and chunking online"},
      {"KOROVOD_AUTOTUNE_LOG", "", "CSV file with one row per autotune trial"},
      {"KOROVOD_AUTOTUNE_WARMUP_SAMPLES", "3", "autotune samples discarded before the first trial"},
      {"KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE", "10", "engine cycles that moved data per sample"},
      {"KOROVOD_AUTOTUNE_SAMPLES_PER_TRIAL", "3", "samples per trial (median scores the trial)"},
      {"KOROVOD_AUTOTUNE_MAX_TRIALS", "24", "trials before autotune settles on the best"},
  };
  return vars;
}

StatusOr<EngineConfig> EngineConfig::FromEnvironment(const Getenv& getenv) {
  EngineConfig c;
  if (auto v = Lookup(getenv, "FUSION_THRESHOLD")) {
    KV_ASSIGN_OR_RETURN(c.fusion_threshold_bytes, ParseBytes(v->second, v->first));
  }
  if (auto v = Lookup(getenv, "FUSION_TENSOR_MAX")) {
    KV_ASSIGN_OR_RETURN(c.fusion_tensor_max_bytes, ParseBytes(v->second, v->first));
  }
  if (auto v = Lookup(getenv, "CYCLE_TIME")) {
    KV_ASSIGN_OR_RETURN(c.cycle_time_ms,
                        ParseNumber(v->second, v->first, "expected milliseconds > 0"));
    if (c.cycle_time_ms <= 0) return Bad(v->second, v->first, "expected milliseconds > 0");
  }
  if (auto v = Lookup(getenv, "CACHE_CAPACITY")) {
    KV_ASSIGN_OR_RETURN(c.cache_capacity, ParseInt(v->second, v->first, 0));
  }
  if (auto v = Lookup(getenv, "STALL_CHECK_TIME_SECONDS")) {
    KV_ASSIGN_OR_RETURN(c.stall_check, ParseSeconds(v->second, v->first));
  }
  if (auto v = Lookup(getenv, "STALL_SHUTDOWN_TIME_SECONDS")) {
    KV_ASSIGN_OR_RETURN(c.stall_shutdown, ParseSeconds(v->second, v->first));
  }
  if (auto v = Lookup(getenv, "TIMELINE")) c.timeline_path = v->first;
  if (auto v = Lookup(getenv, "TIMELINE_MARK_CYCLES")) {
    KV_ASSIGN_OR_RETURN(c.timeline_mark_cycles, ParseBool(v->second, v->first));
  }
  if (auto v = Lookup(getenv, "AUTOTUNE")) {
    KV_ASSIGN_OR_RETURN(c.autotune, ParseBool(v->second, v->first));
  }
  if (auto v = Lookup(getenv, "AUTOTUNE_LOG")) c.autotune_log = v->first;
  if (auto v = Lookup(getenv, "AUTOTUNE_WARMUP_SAMPLES")) {
    KV_ASSIGN_OR_RETURN(c.autotune_warmup_samples, ParseInt(v->second, v->first, 0));
  }
  if (auto v = Lookup(getenv, "AUTOTUNE_CYCLES_PER_SAMPLE")) {
    KV_ASSIGN_OR_RETURN(c.autotune_cycles_per_sample, ParseInt(v->second, v->first, 1));
  }
  if (auto v = Lookup(getenv, "AUTOTUNE_SAMPLES_PER_TRIAL")) {
    KV_ASSIGN_OR_RETURN(c.autotune_samples_per_trial, ParseInt(v->second, v->first, 1));
  }
  if (auto v = Lookup(getenv, "AUTOTUNE_MAX_TRIALS")) {
    KV_ASSIGN_OR_RETURN(c.autotune_max_trials, ParseInt(v->second, v->first, 1));
  }
  KV_RETURN_IF_ERROR(c.Validate());
  return c;
}

StatusOr<EngineConfig> EngineConfig::FromProcessEnvironment() {
  return FromEnvironment([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

Status EngineConfig::Validate() const {
  if (fusion_tensor_max_bytes < 0) {
    return InvalidArgument("KOROVOD_FUSION_TENSOR_MAX must be >= 0 bytes, got " +
                           std::to_string(fusion_tensor_max_bytes));
  }
  if (fusion_threshold_bytes < 0) {
    return InvalidArgument("fusion threshold (KOROVOD_FUSION_THRESHOLD) must be >= 0 bytes, got " +
                           std::to_string(fusion_threshold_bytes));
  }
  if (!(cycle_time_ms > 0) || cycle_time_ms > 60000) {
    return InvalidArgument("cycle time (KOROVOD_CYCLE_TIME) must be in (0, 60000] ms, got " +
                           std::to_string(cycle_time_ms));
  }
  if (cache_capacity < 0 || cache_capacity > (1 << 20)) {
    return InvalidArgument("cache capacity (KOROVOD_CACHE_CAPACITY) must be in [0, 1048576], got " +
                           std::to_string(cache_capacity));
  }
  if (stall_check.count() < 0 || stall_shutdown.count() < 0) {
    return InvalidArgument("stall times (KOROVOD_STALL_*_TIME_SECONDS) must be >= 0");
  }
  if (stall_shutdown.count() > 0 && stall_check.count() > 0 && stall_shutdown <= stall_check) {
    return InvalidArgument("KOROVOD_STALL_SHUTDOWN_TIME_SECONDS (" +
                           std::to_string(stall_shutdown.count() / 1000.0) +
                           " s) must be longer than KOROVOD_STALL_CHECK_TIME_SECONDS (" +
                           std::to_string(stall_check.count() / 1000.0) + " s)");
  }
  if (autotune_warmup_samples < 0 || autotune_cycles_per_sample < 1 ||
      autotune_samples_per_trial < 1 || autotune_max_trials < 1) {
    return InvalidArgument("autotune sample counts must be positive");
  }
  return OkStatus();
}

}  // namespace korovod
