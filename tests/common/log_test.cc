// common/log.h: levels, the subsystem filter, the line format, KOROVOD_LOG_* parsing, whole
// lines from concurrent threads.
#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace korovod::logging {
namespace {

// "2026-11-25T07:49:50.123Z " then `rest` (no <regex>: GCC 12 warns inside it under ASan).
bool IsLine(std::string_view line, std::string_view rest) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.dddZ ";
  if (line.size() != kShape.size() + rest.size()) return false;
  for (size_t i = 0; i < kShape.size(); ++i) {
    const bool digit = line[i] >= '0' && line[i] <= '9';
    if (kShape[i] == 'd' ? !digit : line[i] != kShape[i]) return false;
  }
  return line.substr(kShape.size()) == rest;
}

// Captures every line in memory; restores the defaults after each test.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ResetForTest();
    SetSink([this](std::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override { ResetForTest(); }

  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

  static Getenv Env(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST_F(LogTest, LineHasTimeLevelRoleSubsystemAndMessage) {
  SetRole("rank 3");
  KV_LOG(kWarning, kWorld, "KOROVOD_IFACE=%s ignored", "eth1");
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(IsLine(lines[0], "WARNING [rank 3] world: KOROVOD_IFACE=eth1 ignored")) << lines[0];
}

TEST_F(LogTest, FormatLineIsRfc3339UtcWithMilliseconds) {
  const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1795000190123));
  EXPECT_EQ(FormatLine(t, Level::kInfo, "korovodrun", Subsystem::kLauncher, "hello"),
            "2026-11-18T11:09:50.123Z INFO [korovodrun] launcher: hello");
  // No role set yet: no brackets.
  EXPECT_EQ(FormatLine(t, Level::kError, "", Subsystem::kOperator, "x"),
            "2026-11-18T11:09:50.123Z ERROR operator: x");
}

TEST_F(LogTest, LevelFiltersBelow) {
  KV_LOG(kDebug, kEngine, "debug hidden by default");
  KV_LOG(kInfo, kEngine, "info shown");
  SetLevel(Level::kWarning);
  KV_LOG(kInfo, kEngine, "info hidden");
  KV_LOG(kError, kEngine, "error shown");
  SetLevel(Level::kTrace);
  KV_LOG(kTrace, kEngine, "trace shown");
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(" INFO engine: info shown"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" ERROR engine: error shown"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(" TRACE engine: trace shown"), std::string::npos) << lines[2];
}

TEST_F(LogTest, FilteredArgumentsAreNotEvaluated) {
  int calls = 0;
  auto arg = [&calls] {
    ++calls;
    return "x";
  };
  KV_LOG(kDebug, kEngine, "%s", arg());
  EXPECT_EQ(calls, 0);
  KV_LOG(kInfo, kEngine, "%s", arg());
  EXPECT_EQ(calls, 1);
}

TEST_F(LogTest, SubsystemFilterFromEnvironment) {
  ASSERT_TRUE(Configure(Env({{"KOROVOD_LOG_SUBSYSTEMS", "world, Arena"}})).ok());
  KV_LOG(kInfo, kEngine, "engine hidden");
  KV_LOG(kInfo, kWorld, "world shown");
  KV_LOG(kError, kSidecar, "sidecar hidden, even an error");
  KV_LOG(kInfo, kArena, "arena shown");
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("world: world shown"), std::string::npos);
  EXPECT_NE(lines[1].find("arena: arena shown"), std::string::npos);
}

TEST_F(LogTest, LevelFromEnvironmentAnyCase) {
  ASSERT_TRUE(Configure(Env({{"KOROVOD_LOG_LEVEL", "Debug"}})).ok());
  EXPECT_EQ(level(), Level::kDebug);
  ASSERT_TRUE(Configure(Env({{"KOROVOD_LOG_LEVEL", "warn"}})).ok());
  EXPECT_EQ(level(), Level::kWarning);
  // Unset and empty leave the level as it is.
  ASSERT_TRUE(Configure(Env({{"KOROVOD_LOG_LEVEL", ""}})).ok());
  EXPECT_EQ(level(), Level::kWarning);
}

TEST_F(LogTest, BadLevelNamesVariableValueAndChoices) {
  Status s = Configure(Env({{"KOROVOD_LOG_LEVEL", "verbose"}}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("KOROVOD_LOG_LEVEL=verbose"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("trace, debug, info, warning, error"), std::string::npos)
      << s.message();
  EXPECT_EQ(level(), Level::kInfo);  // unchanged
}

TEST_F(LogTest, BadSubsystemNamesIt) {
  Status s = Configure(Env({{"KOROVOD_LOG_SUBSYSTEMS", "world,nccl"}}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KOROVOD_LOG_SUBSYSTEMS=world,nccl"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("\"nccl\""), std::string::npos) << s.message();
  KV_LOG(kInfo, kEngine, "all subsystems still on");
  EXPECT_EQ(Lines().size(), 1u);
}

TEST_F(LogTest, BadValueFromProcessEnvironmentIsAWarningShownWhateverTheFilter) {
  ::setenv("KOROVOD_LOG_LEVEL", "loud", 1);
  ::setenv("KOROVOD_LOG_SUBSYSTEMS", "world", 1);
  ConfigureFromEnvironment(Subsystem::kSidecar);
  ::unsetenv("KOROVOD_LOG_LEVEL");
  ::unsetenv("KOROVOD_LOG_SUBSYSTEMS");
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" WARNING sidecar: KOROVOD_LOG_LEVEL=loud: expected one of"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("; ignored"), std::string::npos) << lines[0];
}

TEST_F(LogTest, LongMessagesAreWhole) {
  const std::string big(5000, 'x');
  KV_LOG(kInfo, kBench, "%s!", big.c_str());
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(big + "!"), std::string::npos);
}

TEST_F(LogTest, ConcurrentLinesNeverInterleave) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 500; ++i) KV_LOG(kInfo, kEngine, "thread %d line %d end", t, i);
    });
  }
  for (auto& th : threads) th.join();
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 2000u);
  std::map<int, int> next;  // per thread, the next line number expected: whole and in order
  for (const auto& l : lines) {
    const size_t at = l.find(" INFO engine: thread ");
    ASSERT_NE(at, std::string::npos) << l;
    int t = -1, i = -1;
    char end[8] = {};
    ASSERT_EQ(std::sscanf(l.c_str() + at, " INFO engine: thread %d line %d %7s", &t, &i, end), 3)
        << l;
    ASSERT_TRUE(IsLine(l, l.substr(at + 1))) << l;
    EXPECT_STREQ(end, "end") << l;
    EXPECT_EQ(i, next[t]++) << l;
  }
}

// The default sink: one write(2) per line on fd 2, each ending in '\n'.
TEST_F(LogTest, DefaultSinkWritesWholeLinesToStderr) {
  SetSink(nullptr);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fds[1], STDERR_FILENO);
  SetRole("korovod-operator");
  KV_LOG(kInfo, kOperator, "caches synced");
  KV_LOG(kError, kWebhook, "internal error: %d", 7);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  ::close(fds[0]);
  const size_t nl = out.find('\n');
  ASSERT_NE(nl, std::string::npos) << out;
  EXPECT_TRUE(IsLine(out.substr(0, nl), "INFO [korovod-operator] operator: caches synced")) << out;
  EXPECT_TRUE(IsLine(out.substr(nl + 1), "ERROR [korovod-operator] webhook: internal error: 7\n"))
      << out;
}

TEST(LogNames, ParseRoundTrips) {
  for (Level l : {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarning, Level::kError}) {
    auto parsed = ParseLevel(LevelName(l));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, l);
  }
  for (int i = 0; i < kSubsystemCount; ++i) {
    const auto sub = static_cast<Subsystem>(i);
    auto parsed = ParseSubsystem(SubsystemName(sub));
    ASSERT_TRUE(parsed.ok()) << SubsystemName(sub);
    EXPECT_EQ(*parsed, sub);
  }
}

}  // namespace
}  // namespace korovod::logging
