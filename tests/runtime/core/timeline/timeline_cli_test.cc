// korovod-timeline end to end: the built binary run as a user would.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/core/timeline/timeline.h"
#include "tests/runtime/core/timeline/timeline_test_util.h"

#ifndef KOROVOD_TIMELINE_BIN
#error "KOROVOD_TIMELINE_BIN (the path of korovod-timeline) must be defined"
#endif

namespace korovod::testing {
namespace {

using nlohmann::json;

struct ToolRun {
  int exit_code;
  std::string out;
  std::string err;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

ToolRun RunTool(const ScratchDir& dir, const std::vector<std::string>& args) {
  std::string command = Quote(KOROVOD_TIMELINE_BIN);
  for (const std::string& a : args) command.append(" ").append(Quote(a));
  const std::string out = dir.File("stdout.txt");
  const std::string err = dir.File("stderr.txt");
  command.append(" >").append(Quote(out)).append(" 2>").append(Quote(err));
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status)) << command;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadText(out), ReadText(err)};
}

void WriteRank(const std::string& path, int rank) {
  TimelineOptions o;
  o.path = path;
  o.rank = rank;
  o.clock_offset_ns = rank * 1000;
  auto t = Timeline::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  (*t)->NegotiateStart("w", "ALLREDUCE");
  (*t)->NegotiateRankReady("w", rank);
  (*t)->NegotiateEnd("w");
}

TEST(TimelineCli, MergeWritesTheTraceAndASummary) {
  ScratchDir dir;
  const std::string in0 = dir.File("r0.json"), in1 = dir.File("r1.json");
  const std::string out = dir.File("merged.json");
  WriteRank(in0, 0);
  WriteRank(in1, 1);
  const ToolRun run = RunTool(dir, {"merge", "-o", out, in1, in0});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "merged 2 ranks, 6 events into " + out + "\n");
  EXPECT_EQ(run.err, "");

  const json merged = json::parse(ReadText(out));
  int events = 0;
  std::vector<int> pids;
  for (const json& e : merged.at("traceEvents")) {
    if (e.at("ph") != "M") ++events;
    if (e.value("name", "") == "process_name") pids.push_back(e.at("pid"));
  }
  EXPECT_EQ(events, 6);
  EXPECT_EQ(pids, (std::vector<int>{0, 1}));

  const ToolRun long_form = RunTool(dir, {"merge", in0, "--output=" + out});
  EXPECT_EQ(long_form.exit_code, 0) << long_form.err;
  EXPECT_EQ(long_form.out, "merged 1 rank, 3 events into " + out + "\n");
}

TEST(TimelineCli, BadArgumentsPrintUsageAndExitTwo) {
  ScratchDir dir;
  const std::string in = dir.File("r0.json");
  WriteRank(in, 0);
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"split"},
      {"merge"},
      {"merge", in},                        // no output
      {"merge", "-o", dir.File("o.json")},  // no input
      {"merge", in, "-o"},                  // -o without a file
      {"merge", "--frobnicate", "-o", dir.File("o.json"), in},
      {"merge", "-o", dir.File("a.json"), "-o", dir.File("b.json"), in},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    SCOPED_TRACE(joined);
    const ToolRun run = RunTool(dir, args);
    EXPECT_EQ(run.exit_code, 2);
    EXPECT_NE(run.err.find("usage: korovod-timeline merge -o OUT.json"), std::string::npos)
        << run.err;
    EXPECT_EQ(run.out, "");
  }
  struct stat st;
  EXPECT_NE(::stat(dir.File("o.json").c_str(), &st), 0) << "no output on bad arguments";

  const ToolRun help = RunTool(dir, {"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage:"), std::string::npos);
}

TEST(TimelineCli, FailureExitsOneWithTheError) {
  ScratchDir dir;
  const std::string in = dir.File("r0.json");
  const std::string absent = dir.File("absent.json");
  const std::string out = dir.File("merged.json");
  WriteRank(in, 0);
  const ToolRun run = RunTool(dir, {"merge", "-o", out, in, absent});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find(absent), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("usage:"), std::string::npos) << run.err;
  EXPECT_EQ(run.out, "");
  struct stat st;
  EXPECT_NE(::stat(out.c_str(), &st), 0) << "no output on failure";

  const ToolRun unwritable = RunTool(dir, {"merge", "-o", dir.File("no/dir/out.json"), in});
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_NE(unwritable.err.find(dir.File("no/dir/out.json")), std::string::npos) << unwritable.err;
}

}  // namespace
}  // namespace korovod::testing
