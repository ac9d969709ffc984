// The engine's timeline, recorded by every rank, parsed event by event, then merged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/core/timeline/timeline_merge.h"
#include "tests/runtime/core/engine_harness.h"

namespace korovod::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

std::string TempDir() {
  std::string t = "/tmp/korovod-tl-XXXXXX";
  return mkdtemp(t.data());
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// One lane's events in file order: ("B", name) / ("E", "") / ("i", name), plus their args.
struct Lane {
  std::vector<std::string> seq;
  std::vector<json> args;
  std::vector<double> ts;
};

std::map<std::string, Lane> Lanes(const json& events) {
  std::map<int64_t, std::string> tid_name;
  for (const auto& e : events) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      tid_name[e["tid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
    }
  }
  std::map<std::string, Lane> lanes;
  for (const auto& e : events) {
    const std::string ph = e.value("ph", "");
    if (ph == "M") continue;
    Lane& l = lanes[tid_name[e["tid"].get<int64_t>()]];
    l.seq.push_back(ph == "E" ? "E" : ph + ":" + e.value("name", ""));
    l.args.push_back(e.contains("args") ? e["args"] : json());
    l.ts.push_back(e["ts"].get<double>());
  }
  return lanes;
}

std::vector<float> Filled(size_t n, float v) { return std::vector<float>(n, v); }

TEST(EngineTimeline, EveryRankRecordsNegotiationFusionAndPhasesAndTheFilesMerge) {
  const std::string dir = TempDir();
  EngineWorldSpec spec;
  spec.size = 2;
  spec.config.stall_check = 0ms;
  spec.config.cycle_time_ms = 100;  // the burst after the barrier lands in one cycle: fused
  spec.config.gather_time_us = 100000;
  spec.config.timeline_path = dir + "/tl.{rank}.json";
  spec.config.timeline_mark_cycles = true;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "start"));
    std::vector<std::vector<float>> in{Filled(10, 1), Filled(20, 2), Filled(30, 3)}, out(3);
    std::vector<OpHandle> hs;
    for (int k = 0; k < 3; ++k) {
      OpRequest r;
      r.name = "grad/" + std::to_string(k);
      r.shape = {static_cast<int64_t>(in[k].size())};
      r.input = in[k].data();
      out[k].resize(in[k].size());
      r.output = out[k].data();
      KV_ASSIGN_OR_RETURN(OpHandle h, c.engine().Submit(r));
      hs.push_back(h);
    }
    for (auto& h : hs) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    return c.engine().StopTimeline();
  });
  ExpectEnginesOk(reports);

  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json events = ReadJson(dir + "/tl." + std::to_string(rank) + ".json");
    bool clock = false;
    for (const auto& e : events) {
      if (e.value("name", "") == "korovod_clock") {
        clock = true;
        EXPECT_EQ(e["args"]["rank"].get<int>(), rank);
      }
      EXPECT_EQ(e["pid"].get<int>(), rank);
    }
    EXPECT_TRUE(clock);
    auto lanes = Lanes(events);
    ASSERT_TRUE(lanes.count("cycle"));
    EXPECT_GE(lanes["cycle"].seq.size(), 2u);
    EXPECT_EQ(lanes["cycle"].seq.front(), "i:CYCLE_START");
    for (int k = 0; k < 3; ++k) {
      const std::string name = "grad/" + std::to_string(k);
      SCOPED_TRACE(name);
      ASSERT_TRUE(lanes.count(name));
      const Lane& l = lanes[name];
      // Negotiation (with each rank's READY mark on the coordinator), queue, copy in, the
      // collective with its data plane phase, copy out.
      std::vector<std::string> expect{"B:NEGOTIATE_ALLREDUCE"};
      if (rank == 0) {
        expect.push_back("i:READY rank 0");
        expect.push_back("i:READY rank 1");
      }
      for (const char* s : {"E", "B:QUEUE", "E", "B:MEMCPY_IN_FUSION_BUFFER", "E", "B:ALLREDUCE",
                            "B:RECURSIVE_DOUBLING", "E", "E", "B:MEMCPY_OUT_FUSION_BUFFER", "E"}) {
        expect.push_back(s);
      }
      EXPECT_EQ(l.seq, expect);
      for (size_t i = 1; i < l.ts.size(); ++i) EXPECT_LE(l.ts[i - 1], l.ts[i]) << "event " << i;
      for (size_t i = 0; i < l.seq.size(); ++i) {
        if (l.seq[i] == "B:ALLREDUCE") {
          EXPECT_EQ(l.args[i]["fused_tensors"].get<int>(), 3);
          EXPECT_EQ(l.args[i]["bytes"].get<int>(), 64 + 128 + 128);  // 40, 80, 120 B padded to 64
        }
      }
    }
  }

  auto merged = MergeTimelines({dir + "/tl.0.json", dir + "/tl.1.json"});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  const json m = json::parse(*merged);
  std::set<int> pids;
  int process_names = 0;
  for (const auto& e : m["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e.value("name", "") == "process_name") ++process_names;
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(process_names, 2);
  std::filesystem::remove_all(dir);
}

TEST(EngineTimeline, WithoutRankPlaceholderOnlyRankZeroRecordsAndRunTimeStartWorks) {
  const std::string dir = TempDir();
  EngineWorldSpec spec;
  spec.size = 2;
  spec.config.stall_check = 0ms;
  spec.config.timeline_path = dir + "/only0.json";
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    std::vector<float> in(4, 1.0f), out(4);
    OpRequest r;
    r.name = "w";
    r.shape = {4};
    r.input = in.data();
    r.output = out.data();
    KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
    KV_RETURN_IF_ERROR(c.engine().StopTimeline());
    // Started again at run time on every rank, into a new file.
    KV_RETURN_IF_ERROR(c.engine().StartTimeline(dir + "/later.{rank}.json", false));
    r.name = "v";
    KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
    return c.engine().StopTimeline();
  });
  ExpectEnginesOk(reports);
  EXPECT_TRUE(std::filesystem::exists(dir + "/only0.json"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 3);  // only0 + later.0/1
  for (int rank = 0; rank < 2; ++rank) {
    auto lanes = Lanes(ReadJson(dir + "/later." + std::to_string(rank) + ".json"));
    EXPECT_TRUE(lanes.count("v")) << rank;
    EXPECT_FALSE(lanes.count("w")) << rank;
  }
  auto bad = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    Status s = c.engine().StartTimeline("/nonexistent-dir/x.json", false);
    c.Check(!s.ok() && s.message().find("/nonexistent-dir/x.json") != std::string::npos,
            "open error names the path: " + s.ToString());
    return OkStatus();
  });
  ExpectEnginesOk(bad);
  std::filesystem::remove_all(dir);
}

TEST(EngineAutotune, SearchesLogsEveryTrialAndEveryRankSettlesOnTheSameParameters) {
  const std::string dir = TempDir();
  EngineWorldSpec spec;
  spec.size = 3;
  spec.config.stall_check = 0ms;
  spec.config.autotune = true;
  spec.config.autotune_log = dir + "/autotune.csv";
  spec.config.autotune_warmup_samples = 1;
  spec.config.autotune_cycles_per_sample = 2;
  spec.config.autotune_samples_per_trial = 1;
  spec.config.autotune_max_trials = 4;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    std::vector<std::vector<float>> in(4, std::vector<float>(2000, 1.0f)), out(4);
    for (int step = 0; step < 60; ++step) {
      std::vector<OpHandle> hs;
      for (int k = 0; k < 4; ++k) {
        OpRequest r;
        r.name = "g" + std::to_string(k);
        r.shape = {2000};
        r.input = in[k].data();
        out[k].resize(2000);
        r.output = out[k].data();
        KV_ASSIGN_OR_RETURN(OpHandle h, c.engine().Submit(r));
        hs.push_back(h);
      }
      for (auto& h : hs) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
      for (auto& o : out) c.Check(o[1999] == 3.0f, "result under autotune");
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
  std::ifstream csv(dir + "/autotune.csv");
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 1u + 4u + 1u);  // header, 4 trials, final
  EXPECT_EQ(rows[0].rfind("trial,fusion_threshold_bytes,cycle_time_ms", 0), 0u);
  EXPECT_EQ(rows.back().rfind("final,", 0), 0u);
  // The final row's fusion threshold is what every rank now runs with.
  const std::string fin = rows.back().substr(6);
  const int64_t threshold = std::stoll(fin.substr(0, fin.find(',')));
  for (auto& r : reports) EXPECT_EQ(r.stats.fusion_threshold_bytes, threshold);
  EXPECT_EQ(reports[0].stats.cycle_time_ms, reports[1].stats.cycle_time_ms);
  EXPECT_EQ(reports[0].stats.cycle_time_ms, reports[2].stats.cycle_time_ms);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace korovod::testing
