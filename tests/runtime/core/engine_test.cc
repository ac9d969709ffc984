// The Horovod core end to end: N engines on loopback, ops submitted from trainer threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "tests/runtime/core/engine_harness.h"

namespace korovod::testing {
namespace {

using namespace std::chrono_literals;

EngineWorldSpec Spec(int size, TransportKind t = TransportKind::kTcp) {
  EngineWorldSpec s;
  s.size = size;
  s.transport = t;
  s.config.stall_check = 0ms;
  return s;
}

// Rank r's value at element i of tensor k: small integers, exact in every float type.
float Value(int rank, int k, size_t i) { return static_cast<float>((rank + 1) * (k + 1) + i % 7); }
float SumOverRanks(int n, int k, size_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += Value(r, k, i);
  return s;
}

OpRequest Allreduce(const std::string& name, const std::vector<float>& in, std::vector<float>& out,
                    ReduceOp op = ReduceOp::kSum) {
  OpRequest r;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = DataType::kFloat32;
  r.shape = {static_cast<int64_t>(in.size())};
  r.input = in.data();
  out.resize(in.size());
  r.output = out.data();
  r.op = op;
  return r;
}

class EngineTransportTest : public ::testing::TestWithParam<TransportKind> {};

// Four ranks, three submitting threads each, every rank submitting its tensors in its own order.
TEST_P(EngineTransportTest, ConcurrentSubmissionsInDifferentOrdersAllComplete) {
  constexpr int kTensors = 60;
  auto reports = RunEngineRanks(Spec(4, GetParam()), [&](EngineRank& c) -> Status {
    std::vector<std::vector<float>> in(kTensors), out(kTensors);
    for (int k = 0; k < kTensors; ++k) {
      in[k].resize(1 + (k * 977) % 5000);
      for (size_t i = 0; i < in[k].size(); ++i) in[k][i] = Value(c.rank(), k, i);
    }
    std::vector<int> order(kTensors);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(c.rank() * 7919 + 1));
    std::vector<OpHandle> handles(kTensors);
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        for (int j = t; j < kTensors; j += 3) {
          const int k = order[j];
          auto h = c.engine().Submit(Allreduce("grad." + std::to_string(k), in[k], out[k]));
          if (!h.ok()) {
            ++errors;
            continue;
          }
          handles[k] = *h;
        }
      });
    }
    for (auto& t : threads) t.join();
    c.Check(errors == 0, "submit failed");
    for (int k = 0; k < kTensors; ++k) {
      if (!handles[k].valid()) continue;
      Status s = handles[k].Wait(Deadline::After(60s));
      if (!c.Check(s.ok(), "grad." + std::to_string(k) + ": " + s.ToString())) continue;
      for (size_t i = 0; i < out[k].size(); ++i) {
        if (out[k][i] != SumOverRanks(4, k, i)) {
          c.Fail("grad." + std::to_string(k) + "[" + std::to_string(i) +
                 "] = " + std::to_string(out[k][i]));
          break;
        }
      }
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
  for (auto& r : reports) EXPECT_EQ(r.stats.tensors, uint64_t{kTensors + 1});  // + closing barrier
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineTransportTest,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) { return TransportName(info.param); });

// A group is released together, so its fusion is deterministic: same-dtype members share one
// collective up to the threshold; a member larger than the threshold runs alone; dtypes never mix.
TEST(EngineFusion, GroupFusesByDtypeAndThreshold) {
  EngineWorldSpec spec = Spec(3);
  spec.config.fusion_threshold_bytes = 4096;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    // f32: 10 x 64 floats (10 x 256 B = 2560 B: one collective); one f32 of 2048 floats (8 KiB >
    // threshold: alone); i32: 3 x 16 ints (one collective); f16: 2 x 100 (one collective).
    std::vector<std::vector<float>> f(11), fo(11);
    std::vector<std::vector<int32_t>> ints(3), io(3);
    std::vector<std::vector<uint16_t>> halves(2), ho(2);
    std::vector<OpRequest> reqs;
    for (int k = 0; k < 11; ++k) {
      f[k].assign(k < 10 ? 64 : 2048, static_cast<float>(c.rank() + k));
      reqs.push_back(Allreduce("f" + std::to_string(k), f[k], fo[k]));
    }
    for (int k = 0; k < 3; ++k) {
      ints[k].assign(16, c.rank() * 10 + k);
      io[k].resize(16);
      OpRequest r;
      r.name = "i" + std::to_string(k);
      r.dtype = DataType::kInt32;
      r.shape = {16};
      r.input = ints[k].data();
      r.output = io[k].data();
      reqs.push_back(r);
    }
    for (int k = 0; k < 2; ++k) {
      halves[k].assign(100, FloatToHalf(static_cast<float>(c.rank() + 1)));
      ho[k].resize(100);
      OpRequest r;
      r.name = "h" + std::to_string(k);
      r.dtype = DataType::kFloat16;
      r.shape = {100};
      r.input = halves[k].data();
      r.output = ho[k].data();
      reqs.push_back(r);
    }
    const EngineStats before = c.engine().stats();
    KV_ASSIGN_OR_RETURN(auto handles, c.engine().SubmitGroup(std::move(reqs)));
    for (auto& h : handles) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    const EngineStats after = c.engine().stats();
    c.Check(after.collectives - before.collectives == 4,
            "expected 4 collectives (f32 fused, f32 alone, i32 fused, f16 fused), got " +
                std::to_string(after.collectives - before.collectives));
    for (int k = 0; k < 11; ++k)
      c.Check(fo[k][0] == static_cast<float>(0 + 1 + 2 + 3 * k), "f" + std::to_string(k));
    for (int k = 0; k < 3; ++k) c.Check(io[k][15] == 30 + 3 * k, "i" + std::to_string(k));
    for (int k = 0; k < 2; ++k) c.Check(HalfToFloat(ho[k][99]) == 6.0f, "h" + std::to_string(k));
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

// Tensors submitted right after a barrier land in the same cycle on every rank (long cycle time),
// so they are fused; results must match unfused ones. Fusion off: one collective per tensor.
TEST(EngineFusion, BurstIsFusedAndFusionOffIsNot) {
  for (int64_t threshold : {int64_t{64} << 20, int64_t{0}}) {
    EngineWorldSpec spec = Spec(4);
    spec.config.fusion_threshold_bytes = threshold;
    spec.config.cycle_time_ms = 200;
    auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
      KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "start"));
      const EngineStats before = c.engine().stats();
      std::vector<std::vector<float>> in(20), out(20);
      std::vector<OpHandle> hs;
      for (int k = 0; k < 20; ++k) {
        in[k].resize(100 + k);
        for (size_t i = 0; i < in[k].size(); ++i) in[k][i] = Value(c.rank(), k, i);
        KV_ASSIGN_OR_RETURN(OpHandle h,
                            c.engine().Submit(Allreduce("t" + std::to_string(k), in[k], out[k])));
        hs.push_back(h);
      }
      for (auto& h : hs) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
      for (int k = 0; k < 20; ++k) {
        for (size_t i = 0; i < in[k].size(); ++i) {
          if (out[k][i] != SumOverRanks(4, k, i))
            return Internal("wrong sum in t" + std::to_string(k));
        }
      }
      const uint64_t collectives = c.engine().stats().collectives - before.collectives;
      if (threshold == 0) {
        c.Check(collectives == 20, "fusion off: " + std::to_string(collectives) + " collectives");
      } else {
        c.Check(collectives < 20, "fusion on: " + std::to_string(collectives) + " collectives");
      }
      return OkStatus();
    });
    ExpectEnginesOk(reports);
  }
}

// A fused buffer of ~20 MiB over TCP runs as ~4 MiB segments whose copies overlap the
// neighbouring segments' collectives; every tensor still gets its sum. With the pipeline off, or
// on one host's shared memory (reduced in the shared window instead), it is one collective. Auto
// pipelines unless the ranks outnumber the cores (3 ranks here: on a 2-core machine, not).
TEST(EngineFusion, LargeFusedBufferIsPipelinedInSegmentsOverTheNetwork) {
  using Pipeline = EngineConfig::Pipeline;
  struct Mode {
    TransportKind transport;
    Pipeline pipeline;
  };
  const bool spare_cores = 3 <= static_cast<int>(std::thread::hardware_concurrency());
  for (Mode mode :
       {Mode{TransportKind::kTcp, Pipeline::kOn}, Mode{TransportKind::kTcp, Pipeline::kOff},
        Mode{TransportKind::kTcp, Pipeline::kAuto}, Mode{TransportKind::kShm, Pipeline::kOn}}) {
    EngineWorldSpec spec = Spec(3);
    spec.transport = mode.transport;
    spec.config.cycle_time_ms = 200;
    spec.config.gather_time_us = 100000;  // the whole burst in one cycle
    spec.config.fusion_pipeline = mode.pipeline;
    const char* names[] = {"auto", "on", "off"};
    const std::string what = std::string(TransportName(mode.transport)) + " pipeline " +
                             names[static_cast<int>(mode.pipeline)];
    auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
      constexpr int kTensors = 80;  // ~20 MiB: any split of the burst leaves a part >= 8 MiB
      std::vector<std::vector<float>> in(kTensors), out(kTensors);
      std::vector<OpHandle> hs;
      for (int k = 0; k < kTensors; ++k) {
        in[k].resize(65536 + 7 * k);  // 256 KiB and odd sizes: cuts fall between tensors
        for (size_t i = 0; i < in[k].size(); ++i) in[k][i] = Value(c.rank(), k, i);
      }
      // Every rank submits the burst at once, after a barrier, as a backward pass would.
      KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "burst"));
      const EngineStats before = c.engine().stats();
      for (int k = 0; k < kTensors; ++k) {
        KV_ASSIGN_OR_RETURN(OpHandle h,
                            c.engine().Submit(Allreduce("p" + std::to_string(k), in[k], out[k])));
        hs.push_back(h);
      }
      for (auto& h : hs) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
      for (int k = 0; k < kTensors; ++k) {
        for (size_t i = 0; i < in[k].size(); ++i) {
          if (out[k][i] != SumOverRanks(3, k, i)) {
            return Internal(what + ": wrong sum in p" + std::to_string(k) + " at " +
                            std::to_string(i));
          }
        }
      }
      const EngineStats after = c.engine().stats();
      const uint64_t segments = after.pipelined_segments - before.pipelined_segments;
      const uint64_t collectives = after.collectives - before.collectives;
      // (A rank that re-enters the exchange at once may take the burst's first tensors in a cycle
      // of their own: the collective count is not fixed.)
      const bool pipelined =
          mode.transport == TransportKind::kTcp &&
          (mode.pipeline == Pipeline::kOn || (mode.pipeline == Pipeline::kAuto && spare_cores));
      c.Check(pipelined ? segments >= 2 : segments == 0,
              what + ": " + std::to_string(segments) + " segments in " +
                  std::to_string(collectives) + " collectives");
      return OkStatus();
    });
    ExpectEnginesOk(reports);
  }
}

// The cycle time is only an upper bound: with a 60 s cycle, cached ops that every rank has
// submitted still complete at once (each wait below would fail long before a cycle ran out), the
// rank that submits last completes the exchange the others wait in, and idle engines do not spin.
TEST(EngineCycle, OpsRunOnSubmitNotOnTheCycleTimer) {
  EngineWorldSpec spec = Spec(3);
  spec.config.cycle_time_ms = 60000;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    auto run = [&](const std::string& name, std::vector<float>& in, std::vector<float>& out) {
      auto h = c.engine().Submit(Allreduce(name, in, out));
      if (!h.ok()) return h.status();
      return h->Wait(Deadline::After(20s));
    };
    std::vector<float> in(16, static_cast<float>(c.rank() + 1)), out;
    KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "start"));
    for (int step = 0; step < 20; ++step) {
      KV_RETURN_IF_ERROR(run("w", in, out));
      c.Check(out[0] == 6.0f, "step " + std::to_string(step) + ": sum " + std::to_string(out[0]));
    }
    c.Check(c.engine().stats().cache_hits >= 19, "the steps after the first hit the cache");

    // Idle: no cycles while nothing is submitted (the next timer is a minute away).
    uint64_t cycles = c.engine().stats().cycles;
    std::this_thread::sleep_for(300ms);
    c.Check(c.engine().stats().cycles - cycles <= 1,
            "an idle engine cycled " + std::to_string(c.engine().stats().cycles - cycles) +
                " times in 300 ms");

    // Rank 2 submits 300 ms after the others: they wait in the exchange without spinning, and the
    // op completes once rank 2 has submitted.
    cycles = c.engine().stats().cycles;
    if (c.rank() == 2) std::this_thread::sleep_for(300ms);
    KV_RETURN_IF_ERROR(run("w", in, out));
    c.Check(out[0] == 6.0f, "late rank: sum " + std::to_string(out[0]));
    c.Check(c.engine().stats().cycles - cycles <= 4,
            "waiting for a late rank took " + std::to_string(c.engine().stats().cycles - cycles) +
                " cycles");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineFusion, FusedAllgatherWithUnevenFirstDimensions) {
  EngineWorldSpec spec = Spec(3);
  spec.config.cycle_time_ms = 100;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "start"));
    // Tensor k: rank r contributes (r + k) rows of 3 ints, each row filled with r*100 + k.
    std::vector<std::vector<int32_t>> in(5);
    std::vector<OpHandle> hs;
    for (int k = 0; k < 5; ++k) {
      const int rows = c.rank() + k;
      in[k].assign(rows * 3, c.rank() * 100 + k);
      OpRequest r;
      r.type = OpType::kAllgather;
      r.name = "g" + std::to_string(k);
      r.dtype = DataType::kInt32;
      r.shape = {rows, 3};
      r.input = in[k].data();
      KV_ASSIGN_OR_RETURN(OpHandle h, c.engine().Submit(r));
      hs.push_back(h);
    }
    for (int k = 0; k < 5; ++k) {
      KV_RETURN_IF_ERROR(hs[k].Wait(Deadline::After(60s)));
      const OpResult& res = hs[k].result();
      const int64_t total_rows = (0 + k) + (1 + k) + (2 + k);
      if (!c.Check(res.shape == TensorShape({total_rows, 3}),
                   "g" + std::to_string(k) + " shape " + ShapeString(res.shape)))
        continue;
      const auto* v = reinterpret_cast<const int32_t*>(res.data.data());
      size_t at = 0;
      for (int r = 0; r < 3; ++r) {
        for (int row = 0; row < r + k; ++row) {
          for (int j = 0; j < 3; ++j) {
            if (v[at++] != r * 100 + k)
              c.Fail("g" + std::to_string(k) + " wrong element at " + std::to_string(at - 1));
          }
        }
      }
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineNegotiation, MismatchedShapeFailsOnEveryRankAndEngineContinues) {
  auto reports = RunEngineRanks(Spec(3), [&](EngineRank& c) -> Status {
    std::vector<float> in(c.rank() == 2 ? 5 : 4, 1.0f), out;
    Status s = RunOp(c.engine(), Allreduce("weights", in, out));
    c.Check(s.code() == StatusCode::kFailedPrecondition, "status " + s.ToString());
    const std::string& m = s.message();
    c.Check(m.find("tensor \"weights\"") != std::string::npos, "names tensor: " + m);
    c.Check(m.find("mismatched shape") != std::string::npos, "says shape: " + m);
    c.Check(m.find("[4]") != std::string::npos && m.find("[5]") != std::string::npos,
            "shows shapes: " + m);
    c.Check(m.find("rank 2 (127.0.0.1:") != std::string::npos, "names rank 2: " + m);
    // Dtype and op mismatches, then a good op: the engine keeps working.
    OpRequest r = Allreduce("mixed", in, out);
    r.shape = {4};
    std::vector<int32_t> ints(4, 1), iout(4);
    if (c.rank() == 1) {
      r.dtype = DataType::kInt32;
      r.input = ints.data();
      r.output = iout.data();
    }
    s = RunOp(c.engine(), r);
    c.Check(s.message().find("mismatched dtype") != std::string::npos &&
                s.message().find("int32") != std::string::npos,
            "dtype mismatch: " + s.ToString());
    r = Allreduce("ops", in, out, c.rank() == 0 ? ReduceOp::kMax : ReduceOp::kSum);
    r.shape = {4};
    s = RunOp(c.engine(), r);
    c.Check(s.message().find("mismatched reduce op") != std::string::npos,
            "op mismatch: " + s.ToString());
    std::vector<float> good(8, static_cast<float>(c.rank())), gout;
    s = RunOp(c.engine(), Allreduce("after", good, gout));
    c.Check(s.ok() && gout[7] == 3.0f, "engine continues: " + s.ToString());
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineNegotiation, BadRequestsAreRefusedAtSubmit) {
  auto reports = RunEngineRanks(Spec(2), [&](EngineRank& c) -> Status {
    std::vector<float> in(4, 1.0f), out(4);
    OpRequest r = Allreduce("x", in, out);
    r.shape = {-1};
    auto h = c.engine().Submit(r);
    c.Check(!h.ok() && h.status().message().find("negative dimension") != std::string::npos,
            "negative dim");
    r = Allreduce("x", in, out);
    r.process_set = 7;
    h = c.engine().Submit(r);
    c.Check(!h.ok() && h.status().message().find("unknown process set 7") != std::string::npos,
            "unknown set");
    r = Allreduce("dup", in, out);
    std::vector<float> out2(4);
    OpRequest r2 = Allreduce("dup", in, out2);
    auto group = c.engine().SubmitGroup({r, r2});
    c.Check(!group.ok() && group.status().message().find("already in flight") != std::string::npos,
            "duplicate name");
    OpRequest b;
    b.type = OpType::kBroadcast;
    b.name = "b";
    b.shape = {4};
    b.input = in.data();
    b.root = 5;
    h = c.engine().Submit(b);
    c.Check(!h.ok() && h.status().message().find("root 5") != std::string::npos, "bad root");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineCache, SteadyStepsHitTheCacheAndAShapeChangeInvalidates) {
  auto reports = RunEngineRanks(Spec(3), [&](EngineRank& c) -> Status {
    std::vector<float> in(32, 1.0f), out;
    for (int step = 0; step < 5; ++step) {
      KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("w", in, out)));
      c.Check(out[0] == 3.0f, "step result");
    }
    EngineStats s = c.engine().stats();
    c.Check(s.negotiated == 1, "negotiated once, got " + std::to_string(s.negotiated));
    c.Check(s.cache_hits == 4, "4 cache hits, got " + std::to_string(s.cache_hits));
    // The shape changes on every rank: negotiated again, result has the new shape.
    std::vector<float> bigger(48, 2.0f);
    KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("w", bigger, out)));
    c.Check(out.size() == 48 && out[47] == 6.0f, "new shape result");
    s = c.engine().stats();
    c.Check(s.negotiated == 2, "renegotiated, got " + std::to_string(s.negotiated));
    KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("w", bigger, out)));
    c.Check(c.engine().stats().cache_hits == 5, "hit again after renegotiation");
    // Only rank 1 changes its shape: the entry is invalidated everywhere and the mismatch named.
    std::vector<float> odd(c.rank() == 1 ? 40 : 48, 1.0f);
    Status st = RunOp(c.engine(), Allreduce("w", odd, out));
    c.Check(st.message().find("mismatched shape") != std::string::npos,
            "mismatch after cache: " + st.ToString());
    KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("w", bigger, out)));
    c.Check(out[0] == 6.0f, "works after the mismatch");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

// A grouped allreduce run again under the same names with one member's shape changed: that
// member's cache entry is stale, so the whole group is negotiated again (it used to hang: the
// unchanged members waited in the cache for a member the coordinator held).
TEST(EngineCache, AGroupWithOneChangedMemberIsRenegotiatedWhole) {
  auto reports = RunEngineRanks(Spec(3), [&](EngineRank& c) -> Status {
    auto run_group = [&](int second) -> Status {
      std::vector<float> a(3, 1.0f), b(static_cast<size_t>(second), 2.0f), ao, bo;
      std::vector<OpRequest> reqs = {Allreduce("g.0", a, ao), Allreduce("g.1", b, bo)};
      KV_ASSIGN_OR_RETURN(auto handles, c.engine().SubmitGroup(std::move(reqs)));
      for (auto& h : handles) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
      c.Check(ao.size() == 3 && ao[2] == 3.0f, "unchanged member");
      c.Check(bo.size() == static_cast<size_t>(second) && bo.back() == 6.0f, "changed member");
      return OkStatus();
    };
    KV_RETURN_IF_ERROR(run_group(2));
    KV_RETURN_IF_ERROR(run_group(2));  // from the cache
    const uint64_t negotiated = c.engine().stats().negotiated;
    KV_RETURN_IF_ERROR(run_group(7));  // g.1 changes shape
    c.Check(c.engine().stats().negotiated == negotiated + 2,
            "both members renegotiated, got " +
                std::to_string(c.engine().stats().negotiated - negotiated));
    KV_RETURN_IF_ERROR(run_group(7));  // cached again
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineCache, EvictionWithASmallCacheStaysCorrect) {
  EngineWorldSpec spec = Spec(2);
  spec.config.cache_capacity = 2;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    for (int step = 0; step < 4; ++step) {
      for (int k = 0; k < 3; ++k) {
        std::vector<float> in(8, static_cast<float>(k + c.rank())), out;
        KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("t" + std::to_string(k), in, out)));
        c.Check(out[0] == static_cast<float>(2 * k + 1), "value");
      }
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineJoin, JoinedRanksContributeIdentityAndLastJoinedIsReported) {
  auto reports = RunEngineRanks(Spec(4), [&](EngineRank& c) -> Status {
    // Rank r runs r + 1 steps, then joins. At step k the ranks with r >= k contribute.
    for (int step = 0; step <= c.rank(); ++step) {
      std::vector<float> in(10, static_cast<float>(c.rank() + 1)), sum, avg, mx;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("sum", in, sum)));
      KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("avg", in, avg, ReduceOp::kAverage)));
      KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("max", in, mx, ReduceOp::kMax)));
      float expect_sum = 0;
      for (int r = step; r < 4; ++r) expect_sum += static_cast<float>(r + 1);
      c.Check(sum[9] == expect_sum,
              "step " + std::to_string(step) + " sum " + std::to_string(sum[9]));
      // Joined ranks add zeros and Average divides by the whole set, as in Horovod.
      c.Check(std::fabs(avg[9] - expect_sum / 4) < 1e-6, "step avg " + std::to_string(avg[9]));
      c.Check(mx[9] == 4.0f, "max");
    }
    OpRequest j;
    j.type = OpType::kJoin;
    OpResult res;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), j, &res));
    c.Check(res.last_joined_rank == 3, "last joined " + std::to_string(res.last_joined_rank));
    // After the join the world works normally again.
    std::vector<float> in(4, 1.0f), out;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("after_join", in, out)));
    c.Check(out[0] == 4.0f, "after join");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

// A rank that submits a tensor and then joins still contributes that tensor's data: Average
// divides by every rank that submitted it and its allgather rows are kept.
TEST(EngineJoin, TensorSubmittedBeforeJoiningCarriesTheRanksData) {
  auto reports = RunEngineRanks(Spec(3), [&](EngineRank& c) -> Status {
    // Round 0 negotiates without joins (so later rounds run from the response cache); rounds 1
    // and 2: rank 2 submits, then joins, while the others are still busy.
    for (int round = 0; round < 3; ++round) {
      if (c.rank() != 2 && round > 0) std::this_thread::sleep_for(300ms);
      std::vector<float> in(4, static_cast<float>(c.rank() + 1)), avg;
      std::vector<int32_t> rows(2, c.rank());
      OpRequest g;
      g.type = OpType::kAllgather;
      g.name = "rows";
      g.dtype = DataType::kInt32;
      g.shape = {2};
      g.input = rows.data();
      KV_ASSIGN_OR_RETURN(OpHandle ha,
                          c.engine().Submit(Allreduce("avg", in, avg, ReduceOp::kAverage)));
      KV_ASSIGN_OR_RETURN(OpHandle hg, c.engine().Submit(g));
      OpHandle hj;
      if (round > 0) {
        OpRequest j;
        j.type = OpType::kJoin;
        KV_ASSIGN_OR_RETURN(hj, c.engine().Submit(j));
      }
      KV_RETURN_IF_ERROR(ha.Wait(Deadline::After(60s)));
      KV_RETURN_IF_ERROR(hg.Wait(Deadline::After(60s)));
      if (hj.valid()) KV_RETURN_IF_ERROR(hj.Wait(Deadline::After(60s)));
      const std::string r = " (round " + std::to_string(round) + ")";
      c.Check(avg[3] == 2.0f, "average over all three ranks: " + std::to_string(avg[3]) + r);
      c.Check(hg.result().shape == TensorShape({6}),
              "every rank's rows: " + ShapeString(hg.result().shape) + r);
    }
    c.Check(c.engine().stats().cache_hits >= 4, "rounds 1 and 2 ran from the response cache");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineOps, BroadcastAlltoallReducescatterBarrierAndProcessSets) {
  auto reports = RunEngineRanks(Spec(4, TransportKind::kShm), [&](EngineRank& c) -> Status {
    const int me = c.rank();
    std::vector<double> b(5, me == 2 ? 42.5 : -1.0);
    OpRequest br;
    br.type = OpType::kBroadcast;
    br.name = "bcast";
    br.dtype = DataType::kFloat64;
    br.shape = {5};
    br.input = b.data();
    br.output = b.data();
    br.root = 2;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), br));
    c.Check(b[4] == 42.5, "broadcast");

    // Alltoall: rank r sends (j + 1) rows of 2 values to rank j, each value r*10 + j.
    std::vector<int64_t> splits;
    std::vector<int32_t> send;
    for (int j = 0; j < 4; ++j) {
      splits.push_back(j + 1);
      for (int k = 0; k < 2 * (j + 1); ++k) send.push_back(me * 10 + j);
    }
    OpRequest a;
    a.type = OpType::kAlltoall;
    a.name = "a2a";
    a.dtype = DataType::kInt32;
    a.shape = {10, 2};
    a.input = send.data();
    a.splits = splits;
    OpResult res;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), a, &res));
    c.Check(res.shape == TensorShape({4 * (me + 1), 2}), "a2a shape " + ShapeString(res.shape));
    c.Check(res.received_splits == std::vector<int64_t>(4, me + 1), "received splits");
    const auto* v = reinterpret_cast<const int32_t*>(res.data.data());
    c.Check(v[0] == me && v[2 * (me + 1)] == 10 + me, "a2a values");

    // Reducescatter of 9 rows of 1: ranks get 3, 2, 2, 2 rows.
    std::vector<float> rs_in(9);
    for (int i = 0; i < 9; ++i) rs_in[i] = static_cast<float>(i);
    OpRequest rs;
    rs.type = OpType::kReduceScatter;
    rs.name = "rs";
    rs.shape = {9};
    rs.input = rs_in.data();
    KV_RETURN_IF_ERROR(RunOp(c.engine(), rs, &res));
    const int rows = me == 0 ? 3 : 2;
    const int first = me == 0 ? 0 : 3 + 2 * (me - 1);
    c.Check(res.shape == TensorShape({rows}), "rs shape " + ShapeString(res.shape));
    const auto* f = reinterpret_cast<const float*>(res.data.data());
    c.Check(f[0] == 4.0f * first, "rs value");

    KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "mid"));

    // A process set of ranks 1 and 3: same id everywhere, ops among its members only.
    KV_ASSIGN_OR_RETURN(int set, c.engine().AddProcessSet({3, 1}, Deadline::After(60s)));
    c.Check(set == 1, "set id " + std::to_string(set));
    std::vector<float> in(6, static_cast<float>(me)), out;
    OpRequest r = Allreduce("in_set", in, out);
    r.process_set = set;
    if (me == 1 || me == 3) {
      KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
      c.Check(out[5] == 4.0f, "set allreduce");
    } else {
      auto h = c.engine().Submit(r);
      c.Check(!h.ok() && h.status().message().find("not a member") != std::string::npos,
              "non-member refused");
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

// As in Horovod, only allreduce runs while a rank has joined: allgather, broadcast and
// reducescatter fail on the ranks that submitted them, naming the tensor and the joined rank, at
// once (a rank need not wait for the others to submit the same name), negotiated or cached.
TEST(EngineJoin, OnlyAllreduceRunsWhileARankHasJoined) {
  auto reports = RunEngineRanks(Spec(3), [&](EngineRank& c) -> Status {
    const int me = c.rank();
    std::vector<float> rows(4, static_cast<float>(me));
    auto gather = [&](const std::string& name) {
      OpRequest g;
      g.type = OpType::kAllgather;
      g.name = name;
      g.shape = {2, 2};
      g.input = rows.data();
      return g;
    };
    KV_RETURN_IF_ERROR(RunOp(c.engine(), gather("cached_gather")));  // now in the cache
    KV_RETURN_IF_ERROR(EngineBarrier(c.engine(), "before_join"));
    if (me == 2) {
      OpRequest j;
      j.type = OpType::kJoin;
      OpResult res;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), j, &res));
      c.Check(res.last_joined_rank != 2, "last joined " + std::to_string(res.last_joined_rank));
    } else {
      auto refused = [&](const OpRequest& r) {
        Status s = RunOp(c.engine(), r);
        c.Check(!s.ok() && s.message().find("\"" + r.name + "\"") != std::string::npos &&
                    s.message().find("rank 2") != std::string::npos &&
                    s.message().find("has joined") != std::string::npos,
                r.name + " refused naming the tensor and rank 2: " + s.ToString());
      };
      // Names differ between the ranks: each fails without the other's submission.
      refused(gather("gather.rank" + std::to_string(me)));
      refused(gather("cached_gather"));
      std::vector<float> b(3, 1.0f);
      OpRequest bc;
      bc.type = OpType::kBroadcast;
      bc.name = "bcast";
      bc.shape = {3};
      bc.input = b.data();
      bc.output = b.data();
      refused(bc);
      std::vector<float> rs_out(2);
      OpRequest rs;
      rs.type = OpType::kReduceScatter;
      rs.name = "rs";
      std::vector<float> rs_in(6, 1.0f);
      rs.shape = {6};
      rs.input = rs_in.data();
      rs.output = rs_out.data();
      refused(rs);
      // Allreduce runs: rank 2 adds zeros and Average divides by all three ranks.
      std::vector<float> in(5, static_cast<float>(me + 1)), avg;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), Allreduce("avg", in, avg, ReduceOp::kAverage)));
      c.Check(avg[4] == 1.0f, "average over the set: " + std::to_string(avg[4]));
      OpRequest j;
      j.type = OpType::kJoin;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), j));
    }
    // Everyone has joined: allgather works again.
    OpResult res;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), gather("after_join"), &res));
    c.Check(res.shape == TensorShape({6, 2}), "after join " + ShapeString(res.shape));
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineProcessSets, DuplicatesAreRefusedAndRemovalDropsTheSetEverywhere) {
  auto reports = RunEngineRanks(Spec(3), [&](EngineRank& c) -> Status {
    const int me = c.rank();
    Engine& e = c.engine();
    auto world = e.AddProcessSet({2, 0, 1}, Deadline::After(60s));
    c.Check(
        !world.ok() && world.status().code() == StatusCode::kFailedPrecondition &&
            world.status().message().find("already exists (id 0, the world)") != std::string::npos,
        "the world's ranks are a duplicate: " + world.status().ToString());
    KV_ASSIGN_OR_RETURN(int id, e.AddProcessSet({2, 0}, Deadline::After(60s)));
    auto dup = e.AddProcessSet({0, 2}, Deadline::After(60s));
    c.Check(!dup.ok() && dup.status().message().find("process set [0, 2] already exists (id " +
                                                     std::to_string(id) + ")") != std::string::npos,
            "duplicate named: " + dup.status().ToString());
    KV_ASSIGN_OR_RETURN(Engine::SetInfo info, e.ProcessSetInfo(id));
    c.Check(info.size == 2 && info.rank == (me == 0 ? 0 : me == 2 ? 1 : -1), "set info");
    OpHandle orphan;
    std::vector<float> in(3, 1.0f), out;
    if (me != 1) {
      OpRequest r = Allreduce("in_set", in, out);
      r.process_set = id;
      KV_RETURN_IF_ERROR(RunOp(e, r));
      c.Check(out[0] == 2.0f, "set allreduce");
    }
    std::vector<float> lonely_out;
    if (me == 0) {  // never submitted by rank 2: fails when the set goes
      OpRequest r = Allreduce("orphan", in, lonely_out);
      r.process_set = id;
      KV_ASSIGN_OR_RETURN(orphan, e.Submit(r));
    }
    KV_ASSIGN_OR_RETURN(bool removed, e.RemoveProcessSet(id, Deadline::After(60s)));
    c.Check(removed, "removed");
    if (orphan.valid()) {
      Status s = orphan.Wait(Deadline::After(60s));
      c.Check(s.code() == StatusCode::kAborted && s.message().find("orphan") != std::string::npos &&
                  s.message().find("process set " + std::to_string(id) + " [0, 2] was removed") !=
                      std::string::npos,
              "in-flight op fails naming the set: " + s.ToString());
    }
    KV_ASSIGN_OR_RETURN(bool again, e.RemoveProcessSet(id, Deadline::After(60s)));
    KV_ASSIGN_OR_RETURN(bool world_removed, e.RemoveProcessSet(0, Deadline::After(60s)));
    c.Check(!again && !world_removed, "unknown set and the world are not removed");
    c.Check(!e.ProcessSetInfo(id).ok(), "set info gone");
    OpRequest r = Allreduce("after_removal", in, out);
    r.process_set = id;
    auto h = e.Submit(r);
    c.Check(!h.ok() && h.status().message().find("unknown process set") != std::string::npos,
            "ops on a removed set are refused: " + h.status().ToString());
    KV_ASSIGN_OR_RETURN(int again_id, e.AddProcessSet({0, 2}, Deadline::After(60s)));
    c.Check(again_id > id, "re-added under a new id");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineStall, ShutdownAfterStallNamesTheMissingRankAndTensor) {
  EngineWorldSpec spec = Spec(3);
  spec.config.stall_check = 200ms;
  spec.config.stall_shutdown = 600ms;
  spec.closing_barrier = false;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    if (c.rank() == 2) {
      // Never submits "lonely"; waits until the engine stops.
      for (int i = 0; i < 200 && c.engine().health().ok(); ++i) std::this_thread::sleep_for(50ms);
      Status h = c.engine().health();
      c.Check(h.code() == StatusCode::kAborted && h.message().find("lonely") != std::string::npos,
              "rank 2 learns the reason: " + h.ToString());
      return OkStatus();
    }
    std::vector<float> in(4, 1.0f), out;
    Status s = RunOp(c.engine(), Allreduce("lonely", in, out));
    c.Check(s.code() == StatusCode::kAborted, "aborted: " + s.ToString());
    c.Check(s.message().find("stall") != std::string::npos, "says stall: " + s.message());
    c.Check(s.message().find("rank 2 (127.0.0.1:") != std::string::npos &&
                s.message().find("has not submitted: lonely") != std::string::npos,
            "names rank 2 and the tensor: " + s.message());
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineSubmit, CompletionCallbackRunsOnceWithStatusAndResult) {
  auto reports = RunEngineRanks(Spec(2), [&](EngineRank& c) -> Status {
    std::vector<int32_t> in(3, c.rank() + 1);
    OpRequest r;
    r.type = OpType::kAllgather;
    r.name = "gathered";
    r.dtype = DataType::kInt32;
    r.shape = {3};
    r.input = in.data();
    std::mutex mu;
    std::condition_variable cv;
    int calls = 0;
    Status seen;
    TensorShape shape;
    KV_ASSIGN_OR_RETURN(OpHandle h, c.engine().Submit(r, [&](const Status& s, const OpResult& res) {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      seen = s;
      shape = res.shape;
      cv.notify_all();
    }));
    KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, 10s, [&] { return calls > 0; });
    c.Check(calls == 1 && seen.ok() && shape == TensorShape({6}), "callback once with result");
    c.Check(h.Poll(), "poll after completion");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineSubmit, GroupCallbacksArePerRequest) {
  auto reports = RunEngineRanks(Spec(2), [&](EngineRank& c) -> Status {
    std::vector<std::vector<float>> in(3), out(3);
    std::vector<OpRequest> reqs;
    std::mutex mu;
    std::vector<int> calls(3, 0);
    std::vector<DoneCallback> done;
    for (int k = 0; k < 3; ++k) {
      in[k].assign(4 + k, static_cast<float>(k));
      out[k].resize(in[k].size());
      reqs.push_back(Allreduce("per_request." + std::to_string(k), in[k], out[k]));
      done.push_back([&, k](const Status& s, const OpResult&) {
        std::lock_guard<std::mutex> lock(mu);
        calls[k] += s.ok() ? 1 : 100;
      });
    }
    auto mismatched = c.engine().SubmitGroup(reqs, std::vector<DoneCallback>(2));
    c.Check(!mismatched.ok() && mismatched.status().message().find("2 callbacks for 3 requests") !=
                                    std::string::npos,
            "callback count checked");
    KV_ASSIGN_OR_RETURN(auto handles, c.engine().SubmitGroup(std::move(reqs), std::move(done)));
    for (auto& h : handles) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    std::lock_guard<std::mutex> lock(mu);
    c.Check(calls == std::vector<int>({1, 1, 1}), "each request's own callback, once");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineConfigCheck, RanksWithDifferentSettingsFailToStartNamingTheSetting) {
  EngineWorldSpec spec = Spec(2);
  spec.customize = [](int rank, EngineConfig& c) {
    if (rank == 1) c.fusion_threshold_bytes = 1 << 20;
  };
  auto reports = RunEngineRanks(spec, [](EngineRank&) { return OkStatus(); });
  for (auto& r : reports) {
    EXPECT_EQ(r.start.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.start.message().find("KOROVOD_FUSION_THRESHOLD is 67108864 on rank 0"),
              std::string::npos)
        << r.start.message();
  }
}

TEST(EngineShutdown, ShutdownByOneRankAbortsOthersInFlightOps) {
  EngineWorldSpec spec = Spec(2);
  spec.closing_barrier = false;
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    if (c.rank() == 0) {
      std::vector<float> in(4, 1.0f), out;
      Status s = RunOp(c.engine(), Allreduce("never_matched", in, out));
      c.Check(s.code() == StatusCode::kAborted &&
                  s.message().find("shut down by rank 1") != std::string::npos,
              "aborted naming rank 1: " + s.ToString());
    } else {
      std::this_thread::sleep_for(100ms);
      c.engine().Shutdown();
      auto h = c.engine().Submit(OpRequest{});
      c.Check(!h.ok(), "submit after shutdown refused");
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

}  // namespace
}  // namespace korovod::testing

namespace korovod::testing {
namespace {

// Collective lanes (TCP): large allreduces of the world run several at once on their own
// connections while the engine thread goes on; results are exact, a broadcast submitted after
// them completes after them, small allreduces and other process sets stay on the engine thread,
// and KOROVOD_COLLECTIVE_LANES=1 or shared memory run everything one at a time.
struct LanesCase {
  TransportKind transport;
  int lanes;
  bool expect_lanes;
};

class EngineLanes : public ::testing::TestWithParam<LanesCase> {};

TEST_P(EngineLanes, LargeAllreducesRunSeveralAtOnceAndKeepOrderWithOtherOps) {
  constexpr int kSize = 3;
  constexpr int kLarge = 24;
  constexpr size_t kElems = 64 << 10;  // 256 KiB each: above the lanes' 64 KiB floor
  EngineWorldSpec spec = Spec(kSize, GetParam().transport);
  spec.config.collective_lanes = GetParam().lanes;
  spec.config.fusion_threshold_bytes = 0;  // one collective per tensor
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    const int me = c.rank();
    // A process set of ranks 0 and 2, created before the burst.
    KV_ASSIGN_OR_RETURN(int set, c.engine().AddProcessSet({0, 2}, Deadline::After(60s)));
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> in(kLarge), out(kLarge);
      std::vector<OpHandle> handles;
      for (int k = 0; k < kLarge; ++k) {
        in[k].resize(kElems);
        for (size_t i = 0; i < kElems; ++i) in[k][i] = Value(me, k + step, i);
        KV_ASSIGN_OR_RETURN(
            OpHandle h, c.engine().Submit(Allreduce("big." + std::to_string(k), in[k], out[k])));
        handles.push_back(h);
      }
      std::vector<float> small_in(16, static_cast<float>(me + 1)), small_out;
      KV_ASSIGN_OR_RETURN(OpHandle small,
                          c.engine().Submit(Allreduce("small", small_in, small_out)));
      std::vector<float> set_in(kElems, 1.0f), set_out;
      OpHandle in_set;
      if (me != 1) {
        OpRequest r = Allreduce("in_set", set_in, set_out);
        r.process_set = set;
        KV_ASSIGN_OR_RETURN(in_set, c.engine().Submit(r));
      }
      std::vector<double> b(1000, me == 1 ? 7.25 : -1.0);
      OpRequest br;
      br.type = OpType::kBroadcast;
      br.name = "bcast";
      br.dtype = DataType::kFloat64;
      br.shape = {1000};
      br.input = b.data();
      br.output = b.data();
      br.root = 1;
      KV_ASSIGN_OR_RETURN(OpHandle bcast, c.engine().Submit(br));

      KV_RETURN_IF_ERROR(bcast.Wait(Deadline::After(60s)));
      c.Check(b[999] == 7.25, "broadcast value");
      // The broadcast was submitted after the allreduces on every rank: they are done.
      for (int k = 0; k < kLarge; ++k) {
        c.Check(handles[k].Poll(), "big." + std::to_string(k) + " still running after bcast");
      }
      for (int k = 0; k < kLarge; ++k) {
        KV_RETURN_IF_ERROR(handles[k].Wait(Deadline::After(60s)));
        for (size_t i = 0; i < kElems; i += 997) {
          float want = 0;
          for (int r = 0; r < kSize; ++r) want += Value(r, k + step, i);
          if (!c.Check(out[k][i] == want, "big." + std::to_string(k) + "[" + std::to_string(i) +
                                              "] = " + std::to_string(out[k][i]))) {
            break;
          }
        }
      }
      KV_RETURN_IF_ERROR(small.Wait(Deadline::After(60s)));
      c.Check(small_out[15] == 6.0f, "small allreduce");
      if (me != 1) {
        KV_RETURN_IF_ERROR(in_set.Wait(Deadline::After(60s)));
        c.Check(set_out[kElems - 1] == 2.0f, "process set allreduce");
      }
    }
    const EngineStats st = c.engine().stats();
    if (GetParam().expect_lanes) {
      // Exactly the world's large allreduces: not the small one, not the process set's.
      c.Check(st.lane_collectives == 3 * kLarge,
              "lane collectives " + std::to_string(st.lane_collectives));
      c.Check(st.lanes_peak_busy >= 2, "peak busy lanes " + std::to_string(st.lanes_peak_busy));
    } else {
      c.Check(st.lane_collectives == 0, "lane collectives " + std::to_string(st.lane_collectives));
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineLanes,
                         ::testing::Values(LanesCase{TransportKind::kTcp, 3, true},
                                           LanesCase{TransportKind::kTcp, 1, false},
                                           LanesCase{TransportKind::kShm, 3, false}),
                         [](const auto& info) {
                           return std::string(TransportName(info.param.transport)) + "_lanes" +
                                  std::to_string(info.param.lanes);
                         });

}  // namespace
}  // namespace korovod::testing
