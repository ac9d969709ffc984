// common/env_settings.h: each typed getter, errors naming the variable and the value, the
// HOROVOD_* fallback, and overrides of a default logged once.
#include "common/env_settings.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace korovod {
namespace {

using std::chrono::milliseconds;

class EnvSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    logging::ResetForTest();
    ResetLoggedOverridesForTest();
    logging::SetSink([this](std::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override {
    logging::ResetForTest();
    ResetLoggedOverridesForTest();
  }

  EnvSettings With(std::map<std::string, std::string> vars) {
    vars_ = std::move(vars);
    return EnvSettings(
        [this](const std::string& name) -> std::optional<std::string> {
          auto it = vars_.find(name);
          if (it == vars_.end()) return std::nullopt;
          return it->second;
        },
        logging::Subsystem::kEngine);
  }

  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

  // The error names the variable and the value as the user wrote them.
  template <typename T>
  static void ExpectBad(const StatusOr<T>& r, const std::string& name_and_value) {
    ASSERT_FALSE(r.ok()) << name_and_value;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind(name_and_value + ": ", 0), 0u) << r.status().message();
  }

 private:
  std::map<std::string, std::string> vars_;
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST_F(EnvSettingsTest, UnsetAndEmptyGiveTheDefault) {
  EnvSettings env = With({{"KOROVOD_B", ""}});
  EXPECT_EQ(*env.Int("KOROVOD_A", 7, 0, 10), 7);
  EXPECT_EQ(*env.Int("KOROVOD_B", 7, 0, 10), 7);
  EXPECT_EQ(*env.String("KOROVOD_A", "x"), "x");
  EXPECT_FALSE(env.Find("KOROVOD_B").has_value());
  EXPECT_TRUE(Lines().empty());
}

TEST_F(EnvSettingsTest, String) {
  EnvSettings env = With({{"KOROVOD_TIMELINE", "/tmp/t-{rank}.json"}});
  EXPECT_EQ(*env.String("KOROVOD_TIMELINE"), "/tmp/t-{rank}.json");
  auto missing = env.RequiredString("KOROVOD_SOCKET");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "KOROVOD_SOCKET is not set");
}

TEST_F(EnvSettingsTest, Int) {
  EnvSettings env = With({{"A", "12"}, {"B", "abc"}, {"C", "99"}, {"D", "1.5"}, {"E", " 3 "}});
  EXPECT_EQ(*env.Int("A", 0, 0, 20), 12);
  EXPECT_EQ(*env.Int("E", 0, 0, 20), 3);
  ExpectBad(env.Int("B", 0, 0, 20), "B=abc");
  ExpectBad(env.Int("C", 0, 0, 20), "C=99");
  ExpectBad(env.Int("D", 0, 0, 20), "D=1.5");
  EXPECT_NE(env.Int("C", 0, 0, 20).status().message().find("[0, 20]"), std::string::npos);
  EXPECT_EQ(*env.RequiredInt("A", 0, 20), 12);
  EXPECT_EQ(env.RequiredInt("Z", 0, 20).status().message(), "Z is not set");
}

TEST_F(EnvSettingsTest, Number) {
  EnvSettings env = With({{"KOROVOD_CYCLE_TIME", "2.5"}, {"BAD", "abc"}, {"ZERO", "0"}});
  EXPECT_DOUBLE_EQ(*env.Number("KOROVOD_CYCLE_TIME", 1, 1e-9, 1e9, "expected ms > 0"), 2.5);
  auto bad = env.Number("BAD", 1, 1e-9, 1e9, "expected milliseconds > 0");
  ExpectBad(bad, "BAD=abc");
  EXPECT_EQ(bad.status().message(), "BAD=abc: expected milliseconds > 0");
  ExpectBad(env.Number("ZERO", 1, 1e-9, 1e9, "expected milliseconds > 0"), "ZERO=0");
}

TEST_F(EnvSettingsTest, Bool) {
  EnvSettings env = With(
      {{"T1", "1"}, {"T2", "TRUE"}, {"T3", "on"}, {"F1", "0"}, {"F2", "No"}, {"BAD", "maybe"}});
  EXPECT_TRUE(*env.Bool("T1", false));
  EXPECT_TRUE(*env.Bool("T2", false));
  EXPECT_TRUE(*env.Bool("T3", false));
  EXPECT_FALSE(*env.Bool("F1", true));
  EXPECT_FALSE(*env.Bool("F2", true));
  ExpectBad(env.Bool("BAD", false), "BAD=maybe");
}

TEST_F(EnvSettingsTest, Bytes) {
  EnvSettings env = With({{"A", "64M"}, {"B", "1048576"}, {"C", "12Q"}});
  EXPECT_EQ(*env.Bytes("A", 0), 64 << 20);
  EXPECT_EQ(*env.Bytes("B", 0), 1 << 20);
  ExpectBad(env.Bytes("C", 0), "C=12Q");
}

TEST_F(EnvSettingsTest, Seconds) {
  EnvSettings env = With({{"A", "0.5"}, {"B", "0"}, {"C", "-1"}, {"D", "0.0001"}, {"E", "x"}});
  EXPECT_EQ(*env.Seconds("A", milliseconds(60000)), milliseconds(500));
  EXPECT_EQ(*env.Seconds("B", milliseconds(60000)), milliseconds(0));
  ExpectBad(env.Seconds("C", milliseconds(0)), "C=-1");
  ExpectBad(env.Seconds("D", milliseconds(0)), "D=0.0001");
  ExpectBad(env.Seconds("E", milliseconds(0)), "E=x");
}

TEST_F(EnvSettingsTest, Choice) {
  EnvSettings env = With({{"A", "tcp"}, {"B", "udp"}});
  EXPECT_EQ(*env.Choice("A", "shm", {"shm", "tcp"}), "tcp");
  EXPECT_EQ(*env.Choice("Z", "shm", {"shm", "tcp"}), "shm");
  auto bad = env.Choice("B", "shm", {"shm", "tcp"});
  ExpectBad(bad, "B=udp");
  EXPECT_EQ(bad.status().message(), "B=udp: expected one of shm, tcp");
}

TEST_F(EnvSettingsTest, List) {
  EnvSettings env = With({{"A", "world, arena,,engine "}, {"B", "x:y"}});
  EXPECT_EQ(*env.List("A", {}), (std::vector<std::string>{"world", "arena", "engine"}));
  EXPECT_EQ(*env.List("B", {}, ':'), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(*env.List("Z", {"d"}), (std::vector<std::string>{"d"}));
}

TEST_F(EnvSettingsTest, FallbackPrefixReadsHorovodNamesAndErrorsNameTheOneRead) {
  EnvSettings env = With({{"HOROVOD_CYCLE_TIME", "5"},
                          {"HOROVOD_CACHE_CAPACITY", "lots"},
                          {"KOROVOD_AUTOTUNE", "1"},
                          {"HOROVOD_AUTOTUNE", "0"}});
  env.WithFallbackPrefix("KOROVOD_", "HOROVOD_");
  EXPECT_DOUBLE_EQ(*env.Number("KOROVOD_CYCLE_TIME", 1, 1e-9, 1e9, "ms"), 5);
  ExpectBad(env.Int("KOROVOD_CACHE_CAPACITY", 0, 0, 10), "HOROVOD_CACHE_CAPACITY=lots");
  EXPECT_TRUE(*env.Bool("KOROVOD_AUTOTUNE", false));  // KOROVOD_* wins
}

TEST_F(EnvSettingsTest, OverrideOfADefaultIsLoggedOnceAtInfo) {
  EnvSettings env = With({{"KOROVOD_FUSION_THRESHOLD", "32M"}, {"KOROVOD_CACHE_CAPACITY", "1024"}});
  EXPECT_EQ(*env.Bytes("KOROVOD_FUSION_THRESHOLD", 64 << 20), 32 << 20);
  EXPECT_EQ(*env.Bytes("KOROVOD_FUSION_THRESHOLD", 64 << 20), 32 << 20);  // read again
  // Set to the default: nothing to report.
  EXPECT_EQ(*env.Int("KOROVOD_CACHE_CAPACITY", 1024, 0, 1 << 20), 1024);
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" INFO engine: KOROVOD_FUSION_THRESHOLD=32M (default 67108864)"),
            std::string::npos)
      << lines[0];
}

TEST_F(EnvSettingsTest, OverridesFollowTheLogLevel) {
  logging::SetLevel(logging::Level::kWarning);
  EnvSettings env = With({{"KOROVOD_AUTOTUNE", "1"}});
  EXPECT_TRUE(*env.Bool("KOROVOD_AUTOTUNE", false));
  EXPECT_TRUE(Lines().empty());
}

TEST_F(EnvSettingsTest, FindAndRequiredNeverLogTheValue) {
  EnvSettings env = With({{"KOROVOD_JOB_KEY", "0123456789abcdef0123456789abcdef"}});
  EXPECT_TRUE(env.Find("KOROVOD_JOB_KEY").has_value());
  EXPECT_TRUE(env.RequiredString("KOROVOD_JOB_KEY").ok());
  EXPECT_TRUE(Lines().empty());
}

}  // namespace
}  // namespace korovod
