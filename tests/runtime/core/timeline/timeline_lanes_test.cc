// The timeline's per-name state is bounded: 10^6 unnamed ops ("allreduce.noname.N", a new name
// each) keep at most kMaxTimelineLanes lanes and the process's memory flat; a lane with an open
// span is never evicted (its End lands on its own tid); a recurring name keeps its lane; an
// evicted name seen again gets a new lane with its own thread_name event. ExpandTimelinePath.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/core/timeline/timeline.h"
#include "tests/runtime/core/timeline/timeline_test_util.h"

namespace korovod::testing {
namespace {

using nlohmann::json;

// Resident set size in MiB (/proc/self/statm).
double RssMiB() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

TEST(TimelineLanesTest, MillionUnnamedOpsKeepLanesAndMemoryBounded) {
  TimelineOptions o;
  o.path = "/dev/null";  // the events are written and dropped: what is measured is the state
  auto t = Timeline::Open(o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  constexpr int kOps = 1000000;
  double rss_at_100k = 0;
  size_t max_lanes = 0;
  for (int i = 0; i < kOps; ++i) {
    const std::string name = "allreduce.noname." + std::to_string(i);
    (*t)->NegotiateStart(name, "ALLREDUCE");
    (*t)->NegotiateRankReady(name, 0);
    (*t)->NegotiateEnd(name);
    (*t)->Start(name, "ALLREDUCE", R"({"bytes":4})");
    (*t)->End(name);
    if (i % 1000 == 0) max_lanes = std::max(max_lanes, (*t)->lanes());
    if (i == 100000) rss_at_100k = RssMiB();
  }
  const double rss_end = RssMiB();
  max_lanes = std::max(max_lanes, (*t)->lanes());
  EXPECT_LE(max_lanes, kMaxTimelineLanes);
  EXPECT_EQ((*t)->lanes(), kMaxTimelineLanes);
  std::printf("timeline: %d distinct names, at most %zu lanes; RSS %.1f MiB after 10^5 ops, "
              "%.1f MiB after 10^6\n",
              kOps, max_lanes, rss_at_100k, rss_end);
  // Unbounded, 900k more lanes would be ~100 MiB (a name, a node, a list entry each). Under
  // AddressSanitizer freed memory sits in its quarantine (256 MiB) and RSS says nothing about
  // what the timeline keeps: there the lane count above is the bound.
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(rss_end - rss_at_100k, 32.0);
#endif
}

TEST(TimelineLanesTest, OpenSpansSurviveEvictionAndRecurringNamesKeepTheirLane) {
  ScratchDir dir;
  TimelineOptions o;
  o.path = dir.File("lanes.json");
  {
    auto t = Timeline::Open(o);
    ASSERT_TRUE(t.ok());
    (*t)->Start("held", "ALLREDUCE");     // stays open while the lanes turn over
    (*t)->Start("recurring", "ALLREDUCE");
    (*t)->End("recurring");
    for (size_t i = 0; i < 2 * kMaxTimelineLanes; ++i) {
      const std::string name = "noname." + std::to_string(i);
      (*t)->Start(name, "ALLREDUCE");
      (*t)->End(name);
      if (i % 64 == 0) {  // used often: never the least recently used
        (*t)->Start("recurring", "ALLREDUCE");
        (*t)->End("recurring");
      }
    }
    (*t)->End("held");
    (*t)->Start("noname.0", "ALLREDUCE");  // evicted long ago: a new lane
    (*t)->End("noname.0");
    EXPECT_LE((*t)->lanes(), kMaxTimelineLanes);
  }
  const json events = ReadTimeline(o.path);
  std::map<std::string, std::vector<int64_t>> tids_of;  // thread_name events per name
  std::map<int64_t, int> open;                          // B minus E per tid
  for (const json& e : events) {
    if (e.value("name", "") == "thread_name") {
      tids_of[e["args"]["name"].get<std::string>()].push_back(e["tid"].get<int64_t>());
    }
    if (e.value("ph", "") == "B") ++open[e["tid"].get<int64_t>()];
    if (e.value("ph", "") == "E") --open[e["tid"].get<int64_t>()];
  }
  ASSERT_EQ(tids_of["held"].size(), 1u);
  EXPECT_EQ(open[tids_of["held"][0]], 0);  // its End landed on its own lane
  EXPECT_EQ(tids_of["recurring"].size(), 1u);
  ASSERT_EQ(tids_of["noname.0"].size(), 2u);
  EXPECT_NE(tids_of["noname.0"][0], tids_of["noname.0"][1]);
  for (const auto& [tid, n] : open) EXPECT_EQ(n, 0) << "tid " << tid;
}

TEST(TimelineLanesTest, ExpandTimelinePath) {
  EXPECT_EQ(ExpandTimelinePath("/tmp/tl.json", 3), "/tmp/tl.json");
  EXPECT_EQ(ExpandTimelinePath("/tmp/{rank}/tl.{rank}.json", 12), "/tmp/12/tl.12.json");
  EXPECT_EQ(ExpandTimelinePath("{rank}{rank}{rank", 0), "00{rank");
  // 10^6 placeholders: one pass (the old loop searched from the start after each replacement).
  std::string many;
  for (int i = 0; i < 1000000; ++i) many += "{rank}";
  EXPECT_EQ(ExpandTimelinePath(many, 7), std::string(1000000, '7'));
}

}  // namespace
}  // namespace korovod::testing
