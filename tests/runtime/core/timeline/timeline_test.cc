// Timeline writer: the file is a Chrome trace-event JSON array with rank metadata, one lane per
// tensor, balanced spans, escaped names; recording from several threads; flushing while open;
// open and write errors.
#include "runtime/core/timeline/timeline.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/runtime/core/timeline/timeline_test_util.h"

namespace korovod::testing {
namespace {

using nlohmann::json;

double SteadyNowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<Timeline> MustOpen(const TimelineOptions& options) {
  auto t = Timeline::Open(options);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// The events of one file, grouped: lane names from thread_name metadata and the non-metadata
// events of each lane in file order. Checks on the way that every lane is named before use.
struct Lanes {
  std::map<int, std::string> names;         // tid -> thread_name
  std::map<int, std::vector<json>> events;  // tid -> events

  int TidOf(const std::string& name) const {
    for (const auto& [tid, n] : names) {
      if (n == name) return tid;
    }
    return -1;
  }
};

Lanes SplitLanes(const json& trace, int pid) {
  Lanes lanes;
  for (const json& e : trace) {
    EXPECT_EQ(e.at("pid"), pid) << e.dump();
    if (e.at("ph") == "M") {
      if (e.at("name") == "thread_name") {
        const int tid = e.at("tid");
        EXPECT_FALSE(lanes.names.contains(tid)) << "tid " << tid << " named twice";
        lanes.names[tid] = e.at("args").at("name");
      }
      continue;
    }
    const int tid = e.at("tid");
    EXPECT_TRUE(lanes.names.contains(tid)) << "event before its lane's thread_name: " << e.dump();
    lanes.events[tid].push_back(e);
  }
  return lanes;
}

// B/E balanced and timestamps non-decreasing on every lane.
void ExpectWellFormedLanes(const Lanes& lanes) {
  for (const auto& [tid, events] : lanes.events) {
    int depth = 0;
    double last_ts = -1;
    for (const json& e : events) {
      const double ts = e.at("ts");
      EXPECT_GE(ts, last_ts) << "lane " << lanes.names.at(tid) << ": " << e.dump();
      last_ts = ts;
      if (e.at("ph") == "B") ++depth;
      if (e.at("ph") == "E") {
        --depth;
        EXPECT_GE(depth, 0) << "E without B on lane " << lanes.names.at(tid);
      }
    }
    EXPECT_EQ(depth, 0) << "unclosed span on lane " << lanes.names.at(tid);
  }
}

// (ph, name) of a lane's events; E events have no name.
std::vector<std::pair<std::string, std::string>> PhasesAndNames(const std::vector<json>& events) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const json& e : events) out.emplace_back(e.at("ph"), e.value("name", ""));
  return out;
}

TEST(Timeline, WritesRankAndClockMetadataFirst) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  o.rank = 3;
  o.clock_offset_ns = -1234567;
  { auto t = MustOpen(o); }
  const json trace = ReadTimeline(o.path);
  ASSERT_EQ(trace.size(), 3u) << trace.dump();
  EXPECT_EQ(trace[0], json::parse(R"({"name":"process_name","ph":"M","pid":3,
                                       "args":{"name":"rank 3"}})"));
  EXPECT_EQ(trace[1], json::parse(R"({"name":"process_sort_index","ph":"M","pid":3,
                                       "args":{"sort_index":3}})"));
  EXPECT_EQ(trace[2].at("name"), "korovod_clock");
  EXPECT_EQ(trace[2].at("ph"), "M");
  EXPECT_EQ(trace[2].at("pid"), 3);
  EXPECT_EQ(trace[2].at("args").at("rank"), 3);
  EXPECT_DOUBLE_EQ(trace[2].at("args").at("clock_offset_us").get<double>(), -1234.567);
}

TEST(Timeline, RecordsEachTensorOnItsOwnLane) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  o.rank = 2;
  const std::vector<std::string> tensors = {
      "layer1/weight",
      "say \"hi\" C:\\path\\",
      std::string("ctl\n\t\r\b\f\x01\x1f end"),
      "градиент/张量 ✓ 🚀",
      "",
  };
  const double before_us = SteadyNowUs();
  {
    auto t = MustOpen(o);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->path(), o.path);
    // Interleaved across tensors, as the engine does.
    for (const auto& n : tensors) t->NegotiateStart(n, "ALLREDUCE");
    for (const auto& n : tensors) t->NegotiateRankReady(n, 0);
    for (const auto& n : tensors) t->NegotiateRankReady(n, 1);
    for (const auto& n : tensors) t->NegotiateEnd(n);
    for (const auto& n : tensors) t->Start(n, "QUEUE");
    for (const auto& n : tensors) t->End(n);
    for (const auto& n : tensors) t->Start(n, "ALLREDUCE", R"({"bytes":1024,"fused_tensors":3})");
    for (const auto& n : tensors) t->Start(n, "RING_REDUCE_SCATTER");
    for (const auto& n : tensors) t->End(n);
    for (const auto& n : tensors) t->End(n);
    EXPECT_TRUE(t->status().ok()) << t->status().ToString();
  }
  const double after_us = SteadyNowUs();

  const std::string text = ReadText(o.path);
  // Microseconds with sub-microsecond digits.
  EXPECT_TRUE(std::regex_search(text, std::regex(R"("ts":[0-9]+\.[0-9]{3}[,}])"))) << text;
  const json trace = json::parse(text);
  const Lanes lanes = SplitLanes(trace, 2);
  ExpectWellFormedLanes(lanes);
  ASSERT_EQ(lanes.names.size(), tensors.size());

  const std::vector<std::pair<std::string, std::string>> want = {
      {"B", "NEGOTIATE_ALLREDUCE"},
      {"i", "READY rank 0"},
      {"i", "READY rank 1"},
      {"E", ""},
      {"B", "QUEUE"},
      {"E", ""},
      {"B", "ALLREDUCE"},
      {"B", "RING_REDUCE_SCATTER"},
      {"E", ""},
      {"E", ""},
  };
  std::set<int> tids;
  for (const auto& name : tensors) {
    SCOPED_TRACE("tensor " + json(name).dump());
    const int tid = lanes.TidOf(name);
    ASSERT_GE(tid, 0) << "no lane named after the tensor";
    EXPECT_TRUE(tids.insert(tid).second);
    const std::vector<json>& events = lanes.events.at(tid);
    ASSERT_EQ(PhasesAndNames(events), want);
    for (const json& e : events) {
      EXPECT_GE(e.at("ts").get<double>(), before_us - 1);
      EXPECT_LE(e.at("ts").get<double>(), after_us + 1);
    }
    EXPECT_EQ(events[1].at("s"), "t");
    EXPECT_EQ(events[1].at("args"), json::parse(R"({"rank":0})"));
    EXPECT_EQ(events[2].at("args"), json::parse(R"({"rank":1})"));
    EXPECT_FALSE(events[0].contains("args"));
    EXPECT_EQ(events[6].at("args"), json::parse(R"({"bytes":1024,"fused_tensors":3})"));
    EXPECT_FALSE(events[7].contains("args"));
  }
}

TEST(Timeline, InvalidUtf8InANameIsReplaced) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  {
    auto t = MustOpen(o);
    t->Start("bad\xff\xc3 end", "QUEUE");
    t->End("bad\xff\xc3 end");
  }
  const Lanes lanes = SplitLanes(ReadTimeline(o.path), 0);
  EXPECT_GE(lanes.TidOf("bad\xEF\xBF\xBD\xEF\xBF\xBD end"), 0);
}

TEST(Timeline, ArgsThatAreNotAnObjectAreKeptAsText) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  {
    auto t = MustOpen(o);
    t->Start("x", "MEMCPY_IN_FUSION_BUFFER", "1024 \"bytes\"");
    t->End("x");
  }
  const Lanes lanes = SplitLanes(ReadTimeline(o.path), 0);
  const std::vector<json>& events = lanes.events.at(lanes.TidOf("x"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].at("args"), json::parse(R"({"text":"1024 \"bytes\""})"));
}

TEST(Timeline, EndWithoutAnOpenSpanIsIgnored) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  {
    auto t = MustOpen(o);
    t->End("never-started");
    t->NegotiateEnd("never-started");
    t->Start("a", "QUEUE");
    t->End("a");
    t->End("a");
  }
  const Lanes lanes = SplitLanes(ReadTimeline(o.path), 0);
  ExpectWellFormedLanes(lanes);
  EXPECT_EQ(lanes.TidOf("never-started"), -1);
  EXPECT_EQ(lanes.events.at(lanes.TidOf("a")).size(), 2u);
}

TEST(Timeline, MarksCyclesOnTheirOwnLaneWhenEnabled) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("on.json");
  o.mark_cycles = true;
  {
    auto t = MustOpen(o);
    t->MarkCycle();
    t->Start("g", "QUEUE");
    t->MarkCycle();
    t->End("g");
    t->MarkCycle();
  }
  const Lanes lanes = SplitLanes(ReadTimeline(o.path), 0);
  const int cycle = lanes.TidOf("cycle");
  ASSERT_GE(cycle, 0);
  EXPECT_NE(cycle, lanes.TidOf("g"));
  const std::vector<json>& events = lanes.events.at(cycle);
  ASSERT_EQ(events.size(), 3u);
  for (const json& e : events) {
    EXPECT_EQ(e.at("ph"), "i");
    EXPECT_EQ(e.at("s"), "t");
    EXPECT_EQ(e.at("name"), "CYCLE_START");
  }

  o.path = dir.File("off.json");
  o.mark_cycles = false;
  {
    auto t = MustOpen(o);
    t->MarkCycle();
  }
  EXPECT_EQ(ReadTimeline(o.path).size(), 3u);  // metadata only
}

TEST(Timeline, EventsFromFourThreadsAreAllRecorded) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  o.rank = 1;
  constexpr int kThreads = 4, kTensors = 16, kRounds = 500;
  {
    auto t = MustOpen(o);
    std::vector<std::jthread> threads;
    for (int k = 0; k < kThreads; ++k) {
      threads.emplace_back([&t, k] {
        for (int r = 0; r < kRounds; ++r) {
          std::string name = "t";
          name.append(std::to_string(k)).append("/").append(std::to_string(r % kTensors));
          std::string args = R"({"round":)";
          args.append(std::to_string(r)).append("}");
          t->Start(name, "ALLREDUCE", args);
          t->NegotiateRankReady("shared", k);
          t->End(name);
        }
      });
    }
  }
  const Lanes lanes = SplitLanes(ReadTimeline(o.path), 1);
  ExpectWellFormedLanes(lanes);
  EXPECT_EQ(lanes.names.size(), static_cast<size_t>(kThreads * kTensors + 1));
  for (int k = 0; k < kThreads; ++k) {
    std::set<int> rounds;
    for (int j = 0; j < kTensors; ++j) {
      const std::string name = "t" + std::to_string(k) + "/" + std::to_string(j);
      const int tid = lanes.TidOf(name);
      ASSERT_GE(tid, 0) << name;
      for (const json& e : lanes.events.at(tid)) {
        if (e.at("ph") == "B") {
          EXPECT_TRUE(rounds.insert(e.at("args").at("round").get<int>()).second);
        }
      }
    }
    EXPECT_EQ(rounds.size(), static_cast<size_t>(kRounds)) << "thread " << k;
  }
  std::map<int, int> ready;
  for (const json& e : lanes.events.at(lanes.TidOf("shared")))
    ++ready[e.at("args").at("rank").get<int>()];
  EXPECT_EQ(ready, (std::map<int, int>{{0, kRounds}, {1, kRounds}, {2, kRounds}, {3, kRounds}}));
}

TEST(Timeline, WritesEventsWhileOpen) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  auto t = MustOpen(o);
  t->NegotiateStart("w", "BROADCAST");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ReadText(o.path).find("NEGOTIATE_BROADCAST") == std::string::npos &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string text = ReadText(o.path);
  EXPECT_NE(text.find("NEGOTIATE_BROADCAST"), std::string::npos) << "not written in 10 s";
  EXPECT_EQ(text.find(']'), std::string::npos) << "closed before the destructor";
}

TEST(Timeline, ClosesTheArrayAndTruncatesAnOldFile) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("t.json");
  WriteText(o.path, std::string(100000, 'x'));
  const mode_t mask = ::umask(022);
  ::umask(mask);
  {
    auto t = MustOpen(o);
    t->Start("a", "QUEUE");
    t->End("a");
  }
  const std::string text = ReadText(o.path);
  ASSERT_LT(text.size(), 2000u);
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.substr(text.size() - 4), "}\n]\n");
  EXPECT_EQ(ReadTimeline(o.path).size(), 6u);

  struct stat st;
  ASSERT_EQ(::stat(dir.File("new.json").c_str(), &st), -1);
  o.path = dir.File("new.json");
  { auto t = MustOpen(o); }
  ASSERT_EQ(::stat(o.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~mask);
}

TEST(Timeline, OpenErrorNamesThePathAndTheCause) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("no/such/dir/t.json");
  auto t = Timeline::Open(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(o.path), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().message().find(std::strerror(ENOENT)), std::string::npos)
      << t.status().ToString();

  o.path = "";
  EXPECT_FALSE(Timeline::Open(o).ok());
}

// A write error (here: the file size limit) is kept in status(); recording goes on.
TEST(Timeline, WriteErrorIsReportedInStatus) {
  ScratchDir dir;
  const std::string path = dir.File("t.json");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child: no gtest assertions, an exit code per failure
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit = {64 << 10, 64 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    TimelineOptions o;
    o.path = path;
    auto t = Timeline::Open(o);
    if (!t.ok()) ::_exit(11);
    for (int i = 0; i < 10000; ++i) {
      (*t)->Start("tensor", "ALLREDUCE", R"({"bytes":1048576})");
      (*t)->End("tensor");
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((*t)->status().ok() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::string message = (*t)->status().message();
    if (message.find(path) == std::string::npos) ::_exit(12);
    if (message.find(std::strerror(EFBIG)) == std::string::npos) ::_exit(13);
    (*t)->Start("tensor", "AFTER_ERROR");  // recording still works (events are dropped)
    (*t)->End("tensor");
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: setrlimit, 11: open, 12: path not named, 13: cause not named";
}

}  // namespace
}  // namespace korovod::testing
