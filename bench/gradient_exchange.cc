#include "bench/gradient_exchange.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_options.h"
#include "bench/gradbench_report.h"
#include "bench/gradient_buffers.h"
#include "bench/launcher.h"
#include "common/env_settings.h"
#include "common/log.h"
#include "runtime/core/engine.h"
#include "runtime/world/communicator.h"

#ifndef KOROVOD_VERSION
#define KOROVOD_VERSION "unknown"
#endif

namespace korovod::bench {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void RankError(int rank, const Status& s) {
  KV_LOG(kError, kBench, "rank %d: %s", rank, s.ToString().c_str());
}

std::string Replace(std::string s, const std::string& key, const std::string& value) {
  for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size())) {
    s.replace(at, key.size(), value);
  }
  return s;
}

std::string GapText(double gap_us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", gap_us);
  return buf;
}

// Engine counters summed over the timed steps (each step's delta taken around its submit/wait).
struct StepCounters {
  double negotiation_ns = 0, execution_ns = 0;
  double cycles = 0, busy_cycles = 0, full_negotiations = 0;
  double collectives = 0, cache_hits = 0, negotiated = 0, bytes = 0, tensors = 0;
  double pipelined_segments = 0;

  void Add(const EngineStats& a, const EngineStats& b) {
    negotiation_ns += static_cast<double>(b.negotiation_ns - a.negotiation_ns);
    execution_ns += static_cast<double>(b.execution_ns - a.execution_ns);
    cycles += static_cast<double>(b.cycles - a.cycles);
    busy_cycles += static_cast<double>(b.busy_cycles - a.busy_cycles);
    full_negotiations += static_cast<double>(b.full_negotiations - a.full_negotiations);
    collectives += static_cast<double>(b.collectives - a.collectives);
    cache_hits += static_cast<double>(b.cache_hits - a.cache_hits);
    negotiated += static_cast<double>(b.negotiated - a.negotiated);
    bytes += static_cast<double>(b.bytes - a.bytes);
    tensors += static_cast<double>(b.tensors - a.tensors);
    pipelined_segments += static_cast<double>(b.pipelined_segments - a.pipelined_segments);
  }
};

class StepRunner {
 public:
  StepRunner(Engine& engine, const std::vector<GradTensor>& tensors, GradientBuffers& grads,
             double gap_us)
      : engine_(engine),
        tensors_(tensors),
        grads_(grads),
        gap_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::micro>(gap_us))) {
    handles_.reserve(tensors.size());
  }

  // Lines the ranks up before a step (the peers' barrier-aligned iterations); not timed.
  Status Barrier() {
    OpRequest r;
    r.type = OpType::kBarrier;
    r.name = "gradbench.barrier";
    KV_ASSIGN_OR_RETURN(OpHandle h, engine_.Submit(std::move(r)));
    return h.Wait().WithContext("step barrier");
  }

  struct Sample {
    double comm_s = 0;
    double slept_s = 0;
    EngineStats before, after;
  };

  StatusOr<Sample> Step() {
    Sample s;
    handles_.clear();
    s.before = engine_.stats();
    const Clock::time_point t0 = Clock::now();
    Clock::duration slept{0};
    for (size_t t = 0; t < tensors_.size(); ++t) {
      if (gap_.count() > 0) {
        const Clock::time_point a = Clock::now();
        std::this_thread::sleep_for(gap_);
        slept += Clock::now() - a;
      }
      OpRequest r;
      r.type = OpType::kAllreduce;
      r.name = tensors_[t].name;
      r.dtype = DataType::kFloat32;
      r.shape = tensors_[t].shape;
      r.input = grads_.data(t);
      r.output = grads_.data(t);
      r.op = ReduceOp::kSum;
      KV_ASSIGN_OR_RETURN(OpHandle h, engine_.Submit(std::move(r)));
      handles_.push_back(std::move(h));
    }
    for (const OpHandle& h : handles_) KV_RETURN_IF_ERROR(h.Wait());
    const Clock::time_point t1 = Clock::now();
    s.after = engine_.stats();
    s.slept_s = Seconds(slept);
    s.comm_s = Seconds(t1 - t0) - s.slept_s;
    return s;
  }

 private:
  Engine& engine_;
  const std::vector<GradTensor>& tensors_;
  GradientBuffers& grads_;
  Clock::duration gap_;
  std::vector<OpHandle> handles_;
};

// Allreduce of a few doubles through the engine (the communicator belongs to it now).
Status ReduceDoubles(Engine& engine, const char* name, ReduceOp op, std::vector<double>* v) {
  OpRequest r;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = DataType::kFloat64;
  r.shape = {static_cast<int64_t>(v->size())};
  r.input = v->data();
  r.output = v->data();
  r.op = op;
  KV_ASSIGN_OR_RETURN(OpHandle h, engine.Submit(std::move(r)));
  return h.Wait().WithContext(std::string("reducing the results (") + name + ")");
}

// The autotune CSV's "final" row ("final,fusion,cycle,small,stripe,score,best"), or "" while the
// search is still running.
std::string FinalAutotuneRow(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.starts_with("final,")) return line;
  }
  return "";
}

std::vector<std::string> SplitCsvLine(const std::string& line) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = line.find(',', pos);
    out.push_back(line.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

std::string ExpandRunPath(const std::string& pattern, const ExchangeRun& run) {
  std::string s = Replace(pattern, "{model}", ResNetName(run.model));
  s = Replace(s, "{transport}", TransportFlagName(run.transport));
  s = Replace(s, "{mode}", FusionModeName(run.mode));
  return Replace(s, "{gap}", GapText(run.gap_us));
}

std::string ExchangeAlgoLabel(FusionMode mode, double gap_us) {
  std::string label = mode == FusionMode::kOff  ? "fusion-off"
                      : mode == FusionMode::kOn ? "fusion-on"
                                                : "autotune";
  if (gap_us > 0) label += "+gap" + GapText(gap_us) + "us";
  return label;
}

int RunExchangeRank(const ExchangeRun& run, const std::string& job_key, int rank, int listen_fd,
                    const std::vector<PeerAddress>& peers, const ResultFile& results) {
  WorldOptions w;
  w.rank = rank;
  w.peers = peers;
  w.listen_fd = listen_fd;
  w.job_key = job_key;
  w.transport = run.transport;
  auto comm_or = Communicator::Create(w);
  if (!comm_or.ok()) {
    RankError(rank, comm_or.status().WithContext("creating the communicator"));
    return kExitRankFailed;
  }
  const std::string transport = comm_or.value()->transport_name();
  const int world = comm_or.value()->size();
  auto engine_or = Engine::Start(std::move(comm_or.value()), run.engine);
  if (!engine_or.ok()) {
    RankError(rank, engine_or.status().WithContext("starting the engine"));
    return kExitRankFailed;
  }
  Engine& engine = *engine_or.value();

  const std::vector<GradTensor> tensors = ResNetGradients(run.model);
  GradientBuffers grads(tensors);
  StepRunner runner(engine, tensors, grads, run.gap_us);

  // Checks every element after a verified step; a failure is reported here and in the row.
  int64_t wrong = 0;
  // PEERBENCH_INJECT_FAULT (set to anything, as for korovod-bench and the peers): rank 0 corrupts
  // one element after every verified exchange, which must turn the row into an error.
  const bool inject_fault = EnvSettings(ProcessGetenv(), logging::Subsystem::kBench)
                                .Find("PEERBENCH_INJECT_FAULT")
                                .has_value();
  auto check = [&](const std::string& which) {
    if (inject_fault && rank == 0) grads.data(grads.size() - 1)[0] += 1.0f;
    std::string report;
    const int64_t bad = grads.Verify(world, tensors, &report);
    if (bad > 0) {
      KV_LOG(kError, kBench, "rank %d: VERIFY FAILED (%s) %s %s %s: %lld wrong elements: %s", rank,
             which.c_str(), ResNetName(run.model), transport.c_str(), FusionModeName(run.mode),
             static_cast<long long>(bad), report.c_str());
    }
    wrong += bad;
  };

  // Autotune: steps until the search settled (its "final" CSV row exists). Every rank reads the
  // log right after a barrier: rank 0 writes the row while recording the cycle that ended the last
  // trial, which precedes its part in that barrier, so every rank sees the same answer.
  int tuning_steps = 0;
  double tuning_s = 0;
  bool settled = false;
  std::string final_row;
  bool first_timed_verify = false;  // the first timed-phase step still needs its verification
  Status st;
  if (run.mode == FusionMode::kAutotune) {
    const Clock::time_point t0 = Clock::now();
    grads.Fill(rank);
    st = runner.Barrier();
    if (st.ok()) {
      auto s = runner.Step();
      if (!s.ok()) st = s.status();
    }
    if (st.ok()) check("first tuning step");
    tuning_steps = 1;
    while (st.ok() && tuning_steps < run.autotune_max_steps) {
      st = runner.Barrier();
      if (!st.ok()) break;
      final_row = FinalAutotuneRow(run.engine.autotune_log);
      if (!final_row.empty()) {
        settled = true;
        break;
      }
      auto s = runner.Step();
      if (!s.ok()) st = s.status();
      ++tuning_steps;
    }
    tuning_s = Seconds(Clock::now() - t0);
  } else {
    first_timed_verify = true;
  }

  // Warm-up, then timed steps; the first (unless autotune did it) and the last are verified.
  const int total = run.warmup + run.steps;
  std::vector<double> comm(run.steps, 0);
  double slept = 0;
  StepCounters counters;
  for (int i = 0; st.ok() && i < total; ++i) {
    const bool verify = (i == 0 && first_timed_verify) || i == total - 1;
    if (verify) grads.Fill(rank);
    st = runner.Barrier();
    if (!st.ok()) break;
    auto s = runner.Step();
    if (!s.ok()) {
      st = s.status();
      break;
    }
    if (verify) check("step " + std::to_string(i));
    if (i >= run.warmup) {
      comm[i - run.warmup] = s->comm_s;
      slept += s->slept_s;
      counters.Add(s->before, s->after);
    }
  }
  if (!st.ok()) {
    RankError(rank, st.WithContext(std::string(ResNetName(run.model)) + " " + transport + " " +
                                   FusionModeName(run.mode)));
    return kExitRankFailed;
  }

  // Per-step times and the verdict, MAX over ranks; this rank's negotiation share, max and sum.
  double comm_sum = 0;
  for (double c : comm) comm_sum += c;
  const double neg_frac = comm_sum > 0 ? counters.negotiation_ns * 1e-9 / comm_sum : 0;
  std::vector<double> maxed = comm;
  maxed.push_back(wrong > 0 ? 1 : 0);
  maxed.push_back(neg_frac);
  std::vector<double> summed = {neg_frac};
  if (Status s = ReduceDoubles(engine, "gradbench.result.max", ReduceOp::kMax, &maxed); !s.ok()) {
    RankError(rank, s);
    return kExitRankFailed;
  }
  if (Status s = ReduceDoubles(engine, "gradbench.result.sum", ReduceOp::kSum, &summed); !s.ok()) {
    RankError(rank, s);
    return kExitRankFailed;
  }
  const bool ok = maxed[run.steps] == 0;
  const EngineStats final_stats = engine.stats();
  engine.Shutdown();

  if (rank == 0) {
    const std::vector<double> step_max(maxed.begin(), maxed.begin() + run.steps);
    const std::string algo = ExchangeAlgoLabel(run.mode, run.gap_us);
    Row row;
    if (!ok) {
      row = {{"peer", "korovod"},
             {"transport", transport},
             {"ranks", world},
             {"bytes", grads.total_bytes()},
             {"algo", algo},
             {"op", "gradient_exchange"},
             {"model", ResNetName(run.model)},
             {"mode", FusionModeName(run.mode)},
             {"error", "verification failed"}};
    } else {
      row = StepRow("korovod", transport, world, grads.total_bytes(), SampleStatsOf(step_max),
                    run.steps, run.warmup, algo);
      row["inplace"] = true;
      row["op"] = "gradient_exchange";
      row["dtype"] = "float32";
      row["model"] = ResNetName(run.model);
      row["mode"] = FusionModeName(run.mode);
      row["tensors"] = tensors.size();
      row["gap_us"] = run.gap_us;
      row["version"] = KOROVOD_VERSION;
      row["verified"] = true;
      const double n = run.steps;
      Row extra;
      extra["step_comm_us"] = Row::array();
      for (double c : step_max) extra["step_comm_us"].push_back(std::round(c * 1e7) / 10);
      extra["negotiation_frac"] = summed[0] / world;
      extra["negotiation_frac_max"] = maxed[run.steps + 1];
      extra["negotiation_ms_per_step"] = counters.negotiation_ns * 1e-6 / n;
      extra["execution_ms_per_step"] = counters.execution_ns * 1e-6 / n;
      extra["collectives_per_step"] = counters.collectives / n;
      extra["cache_hits_per_step"] = counters.cache_hits / n;
      extra["negotiated_per_step"] = counters.negotiated / n;
      extra["tensors_per_step"] = counters.tensors / n;
      extra["bytes_per_step"] = counters.bytes / n;
      extra["cycles_per_step"] = counters.cycles / n;
      extra["busy_cycles_per_step"] = counters.busy_cycles / n;
      extra["full_negotiations_per_step"] = counters.full_negotiations / n;
      extra["gap_slept_ms_per_step"] = slept * 1e3 / n;
      extra["fusion_threshold_bytes"] = final_stats.fusion_threshold_bytes;
      extra["cycle_time_ms"] = final_stats.cycle_time_ms;
      extra["fusion_pipeline"] = run.engine.fusion_pipeline == EngineConfig::Pipeline::kOn ? "on"
                                 : run.engine.fusion_pipeline == EngineConfig::Pipeline::kOff
                                     ? "off"
                                     : "auto";
      extra["fusion_tensor_max_bytes"] = run.engine.fusion_tensor_max_bytes;
      extra["pipelined_segments_per_step"] = counters.pipelined_segments / n;
      if (run.mode == FusionMode::kAutotune) {
        Row a;
        a["settled"] = settled;
        a["tuning_steps"] = tuning_steps;
        a["tuning_s"] = tuning_s;
        a["log"] = run.engine.autotune_log;
        a["warmup_samples"] = run.engine.autotune_warmup_samples;
        a["cycles_per_sample"] = run.engine.autotune_cycles_per_sample;
        a["samples_per_trial"] = run.engine.autotune_samples_per_trial;
        a["max_trials"] = run.engine.autotune_max_trials;
        const std::vector<std::string> f = SplitCsvLine(final_row);
        if (f.size() >= 6) {
          a["small_allreduce_max_bytes"] = std::stoll(f[3]);
          a["tcp_stripe_min_bytes"] = std::stoll(f[4]);
          a["score_bytes_per_sec"] = std::stod(f[5]);
        }
        extra["autotune"] = a;
      }
      row["extra"] = extra;
    }
    if (Status s = results.AppendLine(row.dump()); !s.ok()) {
      RankError(rank, s);
      return kExitRankFailed;
    }
  }
  return ok ? kExitOk : kExitVerifyFailed;
}

}  // namespace korovod::bench
