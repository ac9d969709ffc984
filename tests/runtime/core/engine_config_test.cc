// EngineConfig::FromEnvironment: every documented variable, byte units, the HOROVOD_* fallback,
// and errors that name the variable and the bad value.
#include "runtime/core/engine_config.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>

namespace korovod {
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

StatusOr<EngineConfig> Parse(const Env& env, std::set<std::string>* asked = nullptr) {
  return EngineConfig::FromEnvironment([&](const std::string& name) -> std::optional<std::string> {
    if (asked != nullptr) asked->insert(name);
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// Everything a job spec can set, compared field by field.
void ExpectSameConfig(const EngineConfig& want, const EngineConfig& got) {
  EXPECT_EQ(want.fusion_threshold_bytes, got.fusion_threshold_bytes);
  EXPECT_EQ(want.cycle_time_ms, got.cycle_time_ms);
  EXPECT_EQ(want.gather_time_us, got.gather_time_us);
  EXPECT_EQ(want.straggler_threshold, got.straggler_threshold);
  EXPECT_EQ(want.cache_capacity, got.cache_capacity);
  EXPECT_EQ(want.stall_check, got.stall_check);
  EXPECT_EQ(want.stall_shutdown, got.stall_shutdown);
  EXPECT_EQ(want.timeline_path, got.timeline_path);
  EXPECT_EQ(want.timeline_mark_cycles, got.timeline_mark_cycles);
  EXPECT_EQ(want.autotune, got.autotune);
  EXPECT_EQ(want.autotune_log, got.autotune_log);
  EXPECT_EQ(want.autotune_warmup_samples, got.autotune_warmup_samples);
  EXPECT_EQ(want.autotune_cycles_per_sample, got.autotune_cycles_per_sample);
  EXPECT_EQ(want.autotune_samples_per_trial, got.autotune_samples_per_trial);
  EXPECT_EQ(want.autotune_max_trials, got.autotune_max_trials);
}

// Asserts an InvalidArgument whose message names `name` and contains `value`.
void ExpectRejected(const Env& env, const std::string& name, const std::string& value) {
  SCOPED_TRACE(name + "=" + value);
  auto c = Parse(env);
  ASSERT_FALSE(c.ok()) << "accepted";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  EXPECT_NE(c.status().message().find(name), std::string::npos)
      << "message does not name the variable: " << c.status().message();
  EXPECT_NE(c.status().message().find(value), std::string::npos)
      << "message does not show the value: " << c.status().message();
}
void ExpectRejected(const std::string& name, const std::string& value) {
  ExpectRejected(Env{{name, value}}, name, value);
}

TEST(EngineConfigTest, EmptyEnvironmentGivesTheDefaults) {
  auto c = Parse({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectSameConfig(EngineConfig{}, *c);
  EXPECT_EQ(c->fusion_threshold_bytes, 64 << 20);
  EXPECT_EQ(c->cycle_time_ms, 1.0);
  EXPECT_EQ(c->cache_capacity, 1024);
  EXPECT_EQ(c->stall_check, 60s);
  EXPECT_EQ(c->stall_shutdown, 0s);
  EXPECT_TRUE(EngineConfig{}.Validate().ok());
}

// One non-default value per variable, and where it lands.
struct VariableCase {
  const char* name;
  const char* value;
  std::function<void(const EngineConfig&)> check;
};

std::vector<VariableCase> EveryVariable() {
  return {
      {"KOROVOD_FUSION_THRESHOLD", "5M",
       [](const EngineConfig& c) { EXPECT_EQ(c.fusion_threshold_bytes, 5 << 20); }},
      {"KOROVOD_FUSION_TENSOR_MAX", "256K",
       [](const EngineConfig& c) { EXPECT_EQ(c.fusion_tensor_max_bytes, 256 << 10); }},
      {"KOROVOD_FUSION_PIPELINE", "0",
       [](const EngineConfig& c) { EXPECT_EQ(c.fusion_pipeline, EngineConfig::Pipeline::kOff); }},
      {"KOROVOD_COLLECTIVE_LANES", "4",
       [](const EngineConfig& c) { EXPECT_EQ(c.collective_lanes, 4); }},
      {"KOROVOD_HIERARCHICAL_ALLREDUCE", "1",
       [](const EngineConfig& c) { EXPECT_EQ(c.hierarchical, HierarchyMode::kOn); }},
      {"KOROVOD_WIRE_SECURITY", "encrypt",
       [](const EngineConfig& c) { EXPECT_EQ(c.wire_security, WireSecurity::kEncrypt); }},
      {"KOROVOD_CYCLE_TIME", "2.5", [](const EngineConfig& c) { EXPECT_EQ(c.cycle_time_ms, 2.5); }},
      {"KOROVOD_STRAGGLER_THRESHOLD_MS", "250",
       [](const EngineConfig& c) { EXPECT_EQ(c.straggler_threshold, 250ms); }},
      {"KOROVOD_GATHER_TIME_US", "250",
       [](const EngineConfig& c) { EXPECT_EQ(c.gather_time_us, 250); }},
      {"KOROVOD_CACHE_CAPACITY", "77",
       [](const EngineConfig& c) { EXPECT_EQ(c.cache_capacity, 77); }},
      {"KOROVOD_STALL_CHECK_TIME_SECONDS", "12.5",
       [](const EngineConfig& c) { EXPECT_EQ(c.stall_check, 12500ms); }},
      {"KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "600",
       [](const EngineConfig& c) { EXPECT_EQ(c.stall_shutdown, 600s); }},
      {"KOROVOD_TIMELINE", "/tmp/tl-{rank}.json",
       [](const EngineConfig& c) { EXPECT_EQ(c.timeline_path, "/tmp/tl-{rank}.json"); }},
      {"KOROVOD_TIMELINE_MARK_CYCLES", "1",
       [](const EngineConfig& c) { EXPECT_TRUE(c.timeline_mark_cycles); }},
      {"KOROVOD_AUTOTUNE", "1", [](const EngineConfig& c) { EXPECT_TRUE(c.autotune); }},
      {"KOROVOD_AUTOTUNE_LOG", "/var/log/tune.csv",
       [](const EngineConfig& c) { EXPECT_EQ(c.autotune_log, "/var/log/tune.csv"); }},
      {"KOROVOD_AUTOTUNE_WARMUP_SAMPLES", "0",
       [](const EngineConfig& c) { EXPECT_EQ(c.autotune_warmup_samples, 0); }},
      {"KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE", "25",
       [](const EngineConfig& c) { EXPECT_EQ(c.autotune_cycles_per_sample, 25); }},
      {"KOROVOD_AUTOTUNE_SAMPLES_PER_TRIAL", "5",
       [](const EngineConfig& c) { EXPECT_EQ(c.autotune_samples_per_trial, 5); }},
      {"KOROVOD_AUTOTUNE_MAX_TRIALS", "7",
       [](const EngineConfig& c) { EXPECT_EQ(c.autotune_max_trials, 7); }},
  };
}

TEST(EngineConfigTest, EveryDocumentedVariableIsCoveredHere) {
  std::set<std::string> documented, covered;
  for (const EngineVariable& v : EngineVariables()) documented.insert(v.name);
  for (const VariableCase& v : EveryVariable()) covered.insert(v.name);
  EXPECT_EQ(documented, covered);
}

TEST(EngineConfigTest, EveryVariableIsReadIntoItsSetting) {
  for (const VariableCase& v : EveryVariable()) {
    SCOPED_TRACE(std::string(v.name) + "=" + v.value);
    auto c = Parse({{v.name, v.value}});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    v.check(*c);
  }
}

TEST(EngineConfigTest, EveryVariableAtOnce) {
  Env env;
  for (const VariableCase& v : EveryVariable()) env[v.name] = v.value;
  auto c = Parse(env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const VariableCase& v : EveryVariable()) {
    SCOPED_TRACE(v.name);
    v.check(*c);
  }
}

TEST(EngineConfigTest, EveryVariableIsLookedUpUnderBothPrefixes) {
  std::set<std::string> asked;
  ASSERT_TRUE(Parse({}, &asked).ok());
  for (const EngineVariable& v : EngineVariables()) {
    const std::string name = v.name;
    ASSERT_EQ(name.rfind("KOROVOD_", 0), 0u) << name;
    EXPECT_EQ(asked.count(name), 1u) << name << " is never read";
    EXPECT_EQ(asked.count("HOROVOD_" + name.substr(8)), 1u) << "HOROVOD_" << name.substr(8);
  }
}

// The documented default of each variable, set explicitly, is the built-in default.
TEST(EngineConfigTest, DocumentedDefaultsAreTheDefaults) {
  for (const EngineVariable& v : EngineVariables()) {
    if (std::string(v.default_value).empty()) continue;
    SCOPED_TRACE(std::string(v.name) + "=" + v.default_value);
    auto c = Parse({{v.name, v.default_value}});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ExpectSameConfig(EngineConfig{}, *c);
  }
}

TEST(EngineConfigTest, ByteSizesAcceptBinaryUnits) {
  const std::pair<const char*, int64_t> cases[] = {
      {"0", 0},
      {"1", 1},
      {"67108864", 67108864},
      {"100B", 100},
      {"1K", 1024},
      {"3k", 3 * 1024},
      {"2KiB", 2048},
      {"3M", 3 << 20},
      {"3MiB", 3 << 20},
      {"1G", int64_t{1} << 30},
      {"2GiB", int64_t{2} << 30},
      {"1024G", int64_t{1} << 40},
  };
  for (const auto& [text, bytes] : cases) {
    SCOPED_TRACE(text);
    auto c = Parse({{"KOROVOD_FUSION_THRESHOLD", text}});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->fusion_threshold_bytes, bytes);
  }
}

TEST(EngineConfigTest, BadByteSizesAreRejected) {
  for (const char* bad :
       {"12X", "-1", "abc", "1.5M", "64 M", "1T", "1025G", "99999999999999999999", "0x40", "M"}) {
    ExpectRejected("KOROVOD_FUSION_THRESHOLD", bad);
  }
}

TEST(EngineConfigTest, HorovodVariableIsUsedWhenTheKorovodOneIsUnset) {
  auto c = Parse({{"HOROVOD_FUSION_THRESHOLD", "1M"},
                  {"HOROVOD_CYCLE_TIME", "3"},
                  {"HOROVOD_CACHE_CAPACITY", "5"},
                  {"HOROVOD_STALL_CHECK_TIME_SECONDS", "5"},
                  {"HOROVOD_TIMELINE", "/tmp/h.json"},
                  {"HOROVOD_AUTOTUNE", "1"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fusion_threshold_bytes, 1 << 20);
  EXPECT_EQ(c->cycle_time_ms, 3.0);
  EXPECT_EQ(c->cache_capacity, 5);
  EXPECT_EQ(c->stall_check, 5s);
  EXPECT_EQ(c->timeline_path, "/tmp/h.json");
  EXPECT_TRUE(c->autotune);
}

TEST(EngineConfigTest, KorovodVariableWinsWhenBothAreSet) {
  auto c = Parse({{"HOROVOD_FUSION_THRESHOLD", "1M"},
                  {"KOROVOD_FUSION_THRESHOLD", "2M"},
                  {"HOROVOD_CYCLE_TIME", "abc"},  // not read: the KOROVOD_ one is set
                  {"KOROVOD_CYCLE_TIME", "4"},
                  {"HOROVOD_TIMELINE", "/tmp/h.json"},
                  {"KOROVOD_TIMELINE", "/tmp/k.json"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fusion_threshold_bytes, 2 << 20);
  EXPECT_EQ(c->cycle_time_ms, 4.0);
  EXPECT_EQ(c->timeline_path, "/tmp/k.json");
}

TEST(EngineConfigTest, BadHorovodValueNamesTheHorovodVariable) {
  ExpectRejected("HOROVOD_CYCLE_TIME", "abc");
  ExpectRejected("HOROVOD_FUSION_THRESHOLD", "12X");
}

TEST(EngineConfigTest, BadCycleTimes) {
  for (const char* bad : {"abc", "-1", "0", "-0", "1ms", "nan", "inf", "1e999"}) {
    ExpectRejected("KOROVOD_CYCLE_TIME", bad);
  }
}

TEST(EngineConfigTest, BadGatherTimes) {
  for (const char* bad : {"abc", "-1", "1.5", "5us", "60000001"}) {
    ExpectRejected("KOROVOD_GATHER_TIME_US", bad);
  }
}

TEST(EngineConfigTest, BadStragglerThresholds) {
  for (const char* bad : {"abc", "-1", "2.5", "5ms", "3600001"}) {
    ExpectRejected("KOROVOD_STRAGGLER_THRESHOLD_MS", bad);
  }
}

TEST(EngineConfigTest, BadCollectiveLanes) {
  for (const char* bad : {"0", "17", "-1", "two", "2.5"}) {
    ExpectRejected("KOROVOD_COLLECTIVE_LANES", bad);
  }
  EngineConfig c;
  c.collective_lanes = 0;
  Status s = c.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KOROVOD_COLLECTIVE_LANES"), std::string::npos) << s.ToString();
}

TEST(EngineConfigTest, HierarchicalAllreduceIsAutoOneOrZeroAndTakesHorovodsName) {
  EXPECT_EQ(Parse({})->hierarchical, HierarchyMode::kAuto);
  EXPECT_EQ(Parse({{"KOROVOD_HIERARCHICAL_ALLREDUCE", "0"}})->hierarchical, HierarchyMode::kOff);
  EXPECT_EQ(Parse({})->wire_security, WireSecurity::kNone);
  EXPECT_EQ(Parse({{"KOROVOD_WIRE_SECURITY", "integrity"}})->wire_security,
            WireSecurity::kIntegrity);
  EXPECT_FALSE(Parse({{"KOROVOD_WIRE_SECURITY", "tls"}}).ok());
  EXPECT_EQ(Parse({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}})->hierarchical, HierarchyMode::kOn);
  EXPECT_EQ(
      Parse({{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"KOROVOD_HIERARCHICAL_ALLREDUCE", "0"}})
          ->hierarchical,
      HierarchyMode::kOff);
  for (const char* bad : {"yes", "2", "on", "hier"}) {
    ExpectRejected("KOROVOD_HIERARCHICAL_ALLREDUCE", bad);
  }
}

TEST(EngineConfigTest, FusionPipelineIsAutoOneOrZero) {
  EXPECT_EQ(Parse({})->fusion_pipeline, EngineConfig::Pipeline::kAuto);
  EXPECT_EQ(Parse({{"KOROVOD_FUSION_PIPELINE", "1"}})->fusion_pipeline,
            EngineConfig::Pipeline::kOn);
  EXPECT_EQ(Parse({{"KOROVOD_FUSION_PIPELINE", "auto"}})->fusion_pipeline,
            EngineConfig::Pipeline::kAuto);
  for (const char* bad : {"yes", "2", "on", "AUTO"}) ExpectRejected("KOROVOD_FUSION_PIPELINE", bad);
}

TEST(EngineConfigTest, EmptyValueCountsAsUnset) {
  auto c = Parse({{"KOROVOD_CYCLE_TIME", ""}, {"KOROVOD_FUSION_THRESHOLD", ""}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectSameConfig(EngineConfig{}, *c);
}

// Out of the accepted range: still an error that names the variable and the value.
TEST(EngineConfigTest, CycleTimeAboveTheMaximumNamesTheVariable) {
  ExpectRejected("KOROVOD_CYCLE_TIME", "100000");
}

TEST(EngineConfigTest, BadCacheCapacities) {
  for (const char* bad : {"abc", "-1", "1.5", "1e10", "12K"}) {
    ExpectRejected("KOROVOD_CACHE_CAPACITY", bad);
  }
}

TEST(EngineConfigTest, CacheCapacityAboveTheMaximumNamesTheVariable) {
  ExpectRejected("KOROVOD_CACHE_CAPACITY", "2000000");
}

TEST(EngineConfigTest, CacheCapacityZeroDisablesTheCache) {
  auto c = Parse({{"KOROVOD_CACHE_CAPACITY", "0"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cache_capacity, 0);
}

TEST(EngineConfigTest, BadBooleans) {
  ExpectRejected("KOROVOD_AUTOTUNE", "maybe");
  ExpectRejected("KOROVOD_AUTOTUNE", "2");
  ExpectRejected("KOROVOD_TIMELINE_MARK_CYCLES", "enabled");
}

TEST(EngineConfigTest, BooleanSpellings) {
  for (const char* yes : {"1", "true", "TRUE", "True", "yes", "on"}) {
    auto c = Parse({{"KOROVOD_AUTOTUNE", yes}});
    ASSERT_TRUE(c.ok()) << yes << ": " << c.status().ToString();
    EXPECT_TRUE(c->autotune) << yes;
  }
  for (const char* no : {"0", "false", "FALSE", "False", "no", "off"}) {
    auto c = Parse({{"KOROVOD_AUTOTUNE", no}});
    ASSERT_TRUE(c.ok()) << no << ": " << c.status().ToString();
    EXPECT_FALSE(c->autotune) << no;
  }
}

TEST(EngineConfigTest, BadAutotuneCounts) {
  ExpectRejected("KOROVOD_AUTOTUNE_WARMUP_SAMPLES", "-1");
  ExpectRejected("KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE", "0");
  ExpectRejected("KOROVOD_AUTOTUNE_SAMPLES_PER_TRIAL", "0");
  ExpectRejected("KOROVOD_AUTOTUNE_MAX_TRIALS", "0");
  ExpectRejected("KOROVOD_AUTOTUNE_MAX_TRIALS", "2.5");
  ExpectRejected("KOROVOD_AUTOTUNE_MAX_TRIALS", "many");
}

TEST(EngineConfigTest, StallTimesInSeconds) {
  auto c = Parse(
      {{"KOROVOD_STALL_CHECK_TIME_SECONDS", "0.25"}, {"KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "1"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->stall_check, 250ms);
  EXPECT_EQ(c->stall_shutdown, 1s);
}

TEST(EngineConfigTest, BadStallTimes) {
  ExpectRejected("KOROVOD_STALL_CHECK_TIME_SECONDS", "-1");
  ExpectRejected("KOROVOD_STALL_CHECK_TIME_SECONDS", "soon");
  ExpectRejected("KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-5");
  ExpectRejected("KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "10s");
}

// Seconds too large to count in milliseconds: an error naming the variable, not a wrapped value.
TEST(EngineConfigTest, AbsurdlyLargeStallTimeNamesTheVariable) {
  ExpectRejected("KOROVOD_STALL_CHECK_TIME_SECONDS", "1e300");
  ExpectRejected("KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "1e300");
}

TEST(EngineConfigTest, ShutdownTimeMustExceedCheckTime) {
  for (const char* shutdown : {"30", "20"}) {
    Env env = {{"KOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
               {"KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", shutdown}};
    ExpectRejected(env, "KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", shutdown);
    ExpectRejected(env, "KOROVOD_STALL_CHECK_TIME_SECONDS", "30");
  }
  // Against the default check time (60 s).
  ExpectRejected("KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "45");
}

TEST(EngineConfigTest, ShutdownTimeWithCheckDisabledOrLongerIsAccepted) {
  auto longer = Parse(
      {{"KOROVOD_STALL_CHECK_TIME_SECONDS", "30"}, {"KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "31"}});
  ASSERT_TRUE(longer.ok()) << longer.status().ToString();
  EXPECT_EQ(longer->stall_shutdown, 31s);
  auto no_check = Parse(
      {{"KOROVOD_STALL_CHECK_TIME_SECONDS", "0"}, {"KOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "5"}});
  ASSERT_TRUE(no_check.ok()) << no_check.status().ToString();
  EXPECT_EQ(no_check->stall_check, 0s);
  EXPECT_EQ(no_check->stall_shutdown, 5s);
}

TEST(EngineConfigTest, ValidateChecksValuesSetInCode) {
  EngineConfig c;
  c.fusion_threshold_bytes = -1;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  c = EngineConfig{};
  c.cycle_time_ms = 0;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  c = EngineConfig{};
  c.cache_capacity = -1;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  c = EngineConfig{};
  c.stall_check = 10s;
  c.stall_shutdown = 5s;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
  c = EngineConfig{};
  c.autotune_max_trials = 0;
  EXPECT_EQ(c.Validate().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace korovod
