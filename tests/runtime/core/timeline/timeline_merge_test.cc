// Merging per-rank timelines: one process lane per rank, timestamps moved onto rank 0's clock,
// files of killed ranks accepted, and errors that name the offending file.
#include "runtime/core/timeline/timeline_merge.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/core/timeline/timeline.h"
#include "tests/runtime/core/timeline/timeline_test_util.h"

namespace korovod::testing {
namespace {

using nlohmann::json;

// Writes a closed timeline for `rank` with a few tensors.
void WriteRankTimeline(const std::string& path, int rank, int64_t clock_offset_ns) {
  TimelineOptions o;
  o.path = path;
  o.rank = rank;
  o.clock_offset_ns = clock_offset_ns;
  o.mark_cycles = true;
  auto t = Timeline::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (const char* tensor : {"grad/a", "grad/b"}) {
    (*t)->MarkCycle();
    (*t)->NegotiateStart(tensor, "ALLREDUCE");
    (*t)->NegotiateRankReady(tensor, rank);
    (*t)->NegotiateEnd(tensor);
    (*t)->Start(tensor, "ALLREDUCE", R"({"bytes":64})");
    (*t)->End(tensor);
  }
}

json MustMerge(const std::vector<std::string>& paths) {
  auto merged = MergeTimelines(paths);
  EXPECT_TRUE(merged.ok()) << merged.status().ToString();
  if (!merged.ok()) return json();
  return json::parse(merged.value());
}

std::vector<json> NonMetadata(const json& events) {
  std::vector<json> out;
  for (const json& e : events) {
    if (e.at("ph") != "M") out.push_back(e);
  }
  return out;
}

TEST(MergeTimelines, PutsThreeRanksOnRankZerosClock) {
  ScratchDir dir;
  const std::map<int, int64_t> offsets_ns = {{0, 0}, {1, 1'500'250}, {2, -750'125}};
  std::map<int, std::string> paths;
  for (const auto& [rank, offset] : offsets_ns) {
    paths[rank] = dir.File("rank" + std::to_string(rank) + ".json");
    WriteRankTimeline(paths[rank], rank, offset);
  }
  // Input order is not rank order: pids come from each file's rank.
  const json merged = MustMerge({paths[2], paths[0], paths[1]});
  ASSERT_TRUE(merged.is_object());
  EXPECT_EQ(merged.at("displayTimeUnit"), "ms");
  const json& events = merged.at("traceEvents");

  std::map<int, std::string> process_names;
  std::map<int, int> sort_index;
  std::map<int, std::vector<json>> by_pid;
  std::map<int, std::map<int, std::string>> thread_names;
  for (const json& e : events) {
    EXPECT_NE(e.value("name", ""), "korovod_clock") << "the clock was applied, not copied";
    const int pid = e.at("pid");
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      process_names[pid] = e.at("args").at("name");
    } else if (e.at("ph") == "M" && e.at("name") == "process_sort_index") {
      sort_index[pid] = e.at("args").at("sort_index");
    } else if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      thread_names[pid][e.at("tid")] = e.at("args").at("name");
    } else {
      by_pid[pid].push_back(e);
    }
  }
  EXPECT_EQ(process_names,
            (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}, {2, "rank 2"}}));
  EXPECT_EQ(sort_index, (std::map<int, int>{{0, 0}, {1, 1}, {2, 2}}));

  for (const auto& [rank, offset_ns] : offsets_ns) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json original = ReadTimeline(paths[rank]);
    std::map<int, std::string> original_threads;
    for (const json& e : original) {
      if (e.at("ph") == "M" && e.at("name") == "thread_name") {
        original_threads[e.at("tid")] = e.at("args").at("name");
      }
    }
    EXPECT_EQ(thread_names[rank], original_threads);
    EXPECT_EQ(thread_names[rank].size(), 3u);  // grad/a, grad/b, cycle

    const std::vector<json> want = NonMetadata(original);
    const std::vector<json>& got = by_pid[rank];
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(got.size(), 12u);  // per tensor: cycle, B, i, E, B, E
    const double offset_us = static_cast<double>(offset_ns) / 1000.0;
    for (size_t i = 0; i < got.size(); ++i) {
      // Recorded at local t with offset o: lands at t - o.
      EXPECT_NEAR(got[i].at("ts").get<double>(), want[i].at("ts").get<double>() - offset_us,
                  0.0011);
      json same = got[i];
      json before = want[i];
      same.erase("ts");
      before.erase("ts");
      EXPECT_EQ(same, before);
    }
  }
}

TEST(MergeTimelines, ShiftsByTheOffsetExactly) {
  ScratchDir dir;
  const std::string path = dir.File("r1.json");
  WriteText(path, R"([
{"name":"korovod_clock","ph":"M","pid":7,"args":{"rank":1,"clock_offset_us":5000.5}},
{"ph":"M","pid":7,"tid":4,"name":"thread_name","args":{"name":"grad"}},
{"ph":"B","pid":7,"tid":4,"ts":10000.25,"name":"ALLREDUCE","args":{"bytes":8}},
{"ph":"E","pid":7,"tid":4,"ts":10010.75}
]
)");
  const json merged = MustMerge({path});
  const json want = json::parse(R"({"displayTimeUnit":"ms","traceEvents":[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"rank 1"}},
{"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":1}},
{"ph":"M","pid":1,"tid":4,"name":"thread_name","args":{"name":"grad"}},
{"ph":"B","pid":1,"tid":4,"ts":4999.75,"name":"ALLREDUCE","args":{"bytes":8}},
{"ph":"E","pid":1,"tid":4,"ts":5010.25}
]})");
  EXPECT_EQ(merged, want) << merged.dump(1);
}

// The file of a rank that died: no closing bracket, or a trailing comma.
TEST(MergeTimelines, AcceptsAnUnclosedArray) {
  ScratchDir dir;
  const std::string path = dir.File("r0.json");
  WriteRankTimeline(path, 0, 0);
  std::string text = ReadText(path);
  const size_t events = NonMetadata(json::parse(text)).size();
  const size_t close = text.rfind(']');
  ASSERT_NE(close, std::string::npos);

  WriteText(path, text.substr(0, close));
  EXPECT_EQ(NonMetadata(MustMerge({path}).at("traceEvents")).size(), events);

  WriteText(path, text.substr(0, close - 1) + ",\n");
  EXPECT_EQ(NonMetadata(MustMerge({path}).at("traceEvents")).size(), events);
}

TEST(MergeTimelines, AcceptsTheFileOfAKilledRank) {
  ScratchDir dir;
  const std::string path = dir.File("killed.json");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    TimelineOptions o;
    o.path = path;
    o.rank = 4;
    auto t = Timeline::Open(o);
    if (!t.ok()) ::_exit(10);
    (*t)->NegotiateStart("g", "ALLGATHER");
    (*t)->NegotiateEnd("g");
    (*t)->Start("g", "ALLGATHER");  // still open when the rank dies
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ReadText(path).find("\"ALLGATHER\"") == std::string::npos) {
      if (std::chrono::steady_clock::now() > give_up) ::_exit(11);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::_exit(0);  // no destructor: the array is never closed
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(ReadText(path).find(']'), std::string::npos);

  const json merged = MustMerge({path});
  std::vector<std::string> names;
  for (const json& e : NonMetadata(merged.at("traceEvents"))) {
    EXPECT_EQ(e.at("pid"), 4);
    names.push_back(e.at("ph").get<std::string>() + " " + e.value("name", ""));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"B NEGOTIATE_ALLGATHER", "E ", "B ALLGATHER"}));
}

TEST(MergeTimelines, MissingFileIsNamed) {
  ScratchDir dir;
  const std::string path = dir.File("absent.json");
  auto merged = MergeTimelines({path});
  ASSERT_FALSE(merged.ok());
  EXPECT_NE(merged.status().message().find(path), std::string::npos) << merged.status().ToString();
  EXPECT_NE(merged.status().message().find(std::strerror(ENOENT)), std::string::npos)
      << merged.status().ToString();
}

TEST(MergeTimelines, RejectsAFileWithoutClockMetadata) {
  ScratchDir dir;
  const std::string path = dir.File("other.json");
  for (const char* text :
       {R"([{"name":"x","ph":"i","ts":1,"pid":0,"tid":0}])", R"({"traceEvents":[]})", "", "[\n",
        R"([{"name":"korovod_clock","ph":"i","pid":0}])"}) {
    SCOPED_TRACE(text);
    WriteText(path, text);
    auto merged = MergeTimelines({path});
    ASSERT_FALSE(merged.ok());
    EXPECT_EQ(merged.status().message(),
              path + ": not a korovod timeline (no korovod_clock metadata)");
  }
}

TEST(MergeTimelines, MalformedJsonNamesTheFileAndByte) {
  ScratchDir dir;
  const std::string good = dir.File("good.json");
  const std::string bad = dir.File("bad.json");
  WriteRankTimeline(good, 0, 0);
  WriteText(bad, "[\n{\"name\":\"korovod_clock\",,\"ph\":\"M\"}\n]\n");
  auto merged = MergeTimelines({good, bad});
  ASSERT_FALSE(merged.ok());
  const std::string& m = merged.status().message();
  EXPECT_EQ(m.rfind(bad + ": malformed JSON at byte ", 0), 0u) << m;
  std::smatch byte;
  ASSERT_TRUE(std::regex_search(m, byte, std::regex("at byte ([0-9]+)"))) << m;
  EXPECT_EQ(std::stoi(byte[1]), 27) << "the second comma is byte 27 (1-based)";
}

TEST(MergeTimelines, DuplicateRankNamesBothFiles) {
  ScratchDir dir;
  const std::string a = dir.File("a.json");
  const std::string b = dir.File("b.json");
  const std::string c = dir.File("c.json");
  WriteRankTimeline(a, 1, 0);
  WriteRankTimeline(b, 0, 0);
  WriteRankTimeline(c, 1, 0);
  auto merged = MergeTimelines({a, b, c});
  ASSERT_FALSE(merged.ok());
  const std::string& m = merged.status().message();
  EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find(a), std::string::npos) << m;
  EXPECT_NE(m.find(c), std::string::npos) << m;
}

TEST(MergeTimelines, NoInputsIsAnError) { EXPECT_FALSE(MergeTimelines({}).ok()); }

TEST(MergeTimelines, NumberPastADoubleIsAnErrorNotATerminate) {
  // Found by timeline_merge_fuzzer: nlohmann's out_of_range escaped (only parse_error was
  // caught), ending korovod-timeline with std::terminate.
  ScratchDir dir;
  const std::string path = dir.File("huge.json");
  WriteText(path, "[{\"name\":\"korovod_clock\",\"ph\":\"M\",\"ts\":1e400}]");
  auto merged = MergeTimelines({path});
  ASSERT_FALSE(merged.ok());
  EXPECT_EQ(merged.status().message().rfind(path + ": unreadable JSON: ", 0), 0u)
      << merged.status().message();
  auto texts = MergeTimelineTexts({{"r0", "[1e400]"}});
  EXPECT_FALSE(texts.ok());
}

}  // namespace
}  // namespace korovod::testing
