// korovod-gradbench: a training step's gradient exchange (ResNet-50/101 shapes, backward order)
// through the Horovod engine with Tensor Fusion off, on and autotuned, over TCP and shared
// memory, optionally next to torch.distributed's per-tensor and DDP-bucketed allreduce (see
// bench/README.md).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/gradbench_options.h"
#include "bench/gradbench_report.h"
#include "bench/gradient_exchange.h"
#include "bench/launcher.h"
#include "bench/machine_load.h"
#include "bench/resnet_shapes.h"
#include "bench/result_file.h"
#include "bench/torch_peer.h"
#include "common/log.h"

namespace korovod::bench {
namespace {

// Per-launch job key: every connection authenticates, so a stray process dialling our loopback
// ports cannot join a benchmark world.
std::string RandomJobKey() {
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 4; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    key += buf;
  }
  return key;
}

int CheckShapes() {
  int failures = 0;
  for (ResNetModel m : {ResNetModel::kResNet50, ResNetModel::kResNet101}) {
    const std::string error = CheckResNetShapes(m);
    const std::vector<GradTensor> g = ResNetGradients(m);
    int64_t params = 0;
    for (const GradTensor& t : g) params += t.elements();
    if (error.empty()) {
      std::printf("%s: %zu tensors, %lld parameters (torchvision's counts), backward order: ok\n",
                  ResNetName(m), g.size(), static_cast<long long>(params));
    } else {
      std::printf("%s: MISMATCH: %s\n", ResNetName(m), error.c_str());
      ++failures;
    }
  }
  return failures == 0 ? kExitOk : kExitRankFailed;
}

// Backstop per launch (the engine's own op timeout fires first on a dead peer): connection setup,
// then a generous 3 s per step (ResNet-101 over TCP with fusion off takes ~1 s here) plus the
// compute gaps.
double LaunchTimeout(const GradBenchOptions& o, int steps, double gap_us, int tensors) {
  if (o.timeout_s > 0) return o.timeout_s;
  return 120.0 + steps * (3.0 + gap_us * 1e-6 * tensors);
}

EngineConfig EngineConfigFor(const GradBenchOptions& o, const ExchangeRun& run) {
  EngineConfig c;
  c.cycle_time_ms = o.cycle_time_ms;
  c.fusion_threshold_bytes = run.mode == FusionMode::kOff ? 0 : o.fusion_threshold_bytes;
  c.fusion_pipeline = o.fusion_pipeline;
  if (o.fusion_tensor_max_bytes >= 0) c.fusion_tensor_max_bytes = o.fusion_tensor_max_bytes;
  if (run.mode == FusionMode::kAutotune) {
    c.autotune = true;
    c.autotune_log = ExpandRunPath(o.autotune_log, run);
    c.autotune_warmup_samples = o.autotune_warmup_samples;
    c.autotune_cycles_per_sample = o.autotune_cycles_per_sample;
    c.autotune_samples_per_trial = o.autotune_samples_per_trial;
    c.autotune_max_trials = o.autotune_max_trials;
  }
  if (!o.timeline.empty()) c.timeline_path = ExpandRunPath(o.timeline, run);
  return c;
}

class Runner {
 public:
  Runner(const GradBenchOptions& o, const ResultFile& results) : o_(o), results_(results) {}

  // One launch; appends its rows. Returns kExitOk, kExitVerifyFailed or kExitRankFailed.
  int Korovod(ResNetModel model, TransportKind transport, FusionMode mode, double gap_us) {
    ExchangeRun run;
    run.model = model;
    run.transport = transport;
    run.mode = mode;
    run.gap_us = gap_us;
    run.warmup = o_.warmup;
    run.steps = o_.steps;
    run.autotune_max_steps = o_.autotune_max_steps;
    run.engine = EngineConfigFor(o_, run);
    if (run.engine.autotune) ::unlink(run.engine.autotune_log.c_str());  // no stale "final" row
    const int tensors = static_cast<int>(ResNetGradients(model).size());
    const int steps = o_.warmup + o_.steps + (run.engine.autotune ? o_.autotune_max_steps : 0);
    const std::string key = RandomJobKey();
    const std::string what = std::string(ResNetName(model)) + " " + TransportFlagName(transport) +
                             " fusion " + FusionModeName(mode) + GapNote(gap_us);
    BeforeLaunch(what);
    LaunchOutcome out =
        LaunchRanks(o_.ranks, LaunchTimeout(o_, steps, gap_us, tensors),
                    [&](int rank, int listen_fd, const std::vector<PeerAddress>& peers) {
                      return RunExchangeRank(run, key, rank, listen_fd, peers, results_);
                    });
    return Collect(what, out);
  }

  int Torch(ResNetModel model, double gap_us) {
    TorchPeerRun run;
    run.model = model;
    run.gap_us = gap_us;
    run.ranks = o_.ranks;
    run.warmup = o_.warmup;
    run.steps = o_.steps;
    run.bucket_mib = o_.bucket_mib;
    run.first_bucket_mib = o_.first_bucket_mib;
    run.python = o_.python;
    run.script = o_.peer_script;
    const std::string what =
        std::string(ResNetName(model)) + " torch-gloo per-tensor+bucketed" + GapNote(gap_us);
    BeforeLaunch(what);
    const int tensors = static_cast<int>(ResNetGradients(model).size());
    LaunchOutcome out = RunTorchPeer(
        run, LaunchTimeout(o_, 2 * (o_.warmup + o_.steps), gap_us, tensors) + 60, results_);
    return Collect(what, out);
  }

  const std::vector<Row>& rows() const { return rows_; }
  void set_repeat(int rep) { rep_ = rep; }

 private:
  static std::string GapNote(double gap_us) {
    if (gap_us <= 0) return "";
    char buf[48];
    std::snprintf(buf, sizeof buf, ", compute gap %g us", gap_us);
    return buf;
  }

  void BeforeLaunch(const std::string& what) {
    quiet_wait_s_ = 0;
    busy_before_ = -1;
    if (o_.wait_quiet_s > 0) {
      quiet_wait_s_ = WaitQuiet(o_.wait_quiet_s, kQuietThreshold, &busy_before_);
    }
    KV_LOG(kInfo, kBench, "%s%s ...", what.c_str(),
           o_.repeats > 1 ? (" (launch " + std::to_string(rep_ + 1) + ")").c_str() : "");
    meter_.Start();
    launch_start_ = std::chrono::steady_clock::now();
  }

  int Collect(const std::string& what, const LaunchOutcome& out) {
    const double foreign = meter_.Stop();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_start_).count();
    auto text = results_.ReadAll();
    if (Status s = results_.Clear(); !s.ok() || !text.ok()) {
      KV_LOG(kError, kBench, "%s", (!s.ok() ? s : text.status()).ToString().c_str());
      return kExitRankFailed;
    }
    for (Row& r : ParseRows(*text)) {
      r["rep"] = rep_;
      r["wall_s"] = std::round(wall * 100) / 100;
      r["foreign_cpu_frac"] = std::round(foreign * 1000) / 1000;
      if (o_.wait_quiet_s > 0) {
        r["quiet_wait_s"] = std::round(quiet_wait_s_ * 10) / 10;
        r["busy_before"] = std::round(busy_before_ * 1000) / 1000;
      }
      if (!o_.table) {
        std::printf("%s\n", r.dump().c_str());
        std::fflush(stdout);
      }
      KV_LOG(kInfo, kBench, "  %s %s/%s: %s", r.value("model", "").c_str(),
             r.value("peer", "").c_str(), r.value("mode", "").c_str(),
             r.contains("error") ? r.value("error", "").c_str()
                                 : (std::to_string(r.value("time_us", 0.0) / 1e3) +
                                    " ms exposed communication per step")
                                       .c_str());
      rows_.push_back(std::move(r));
    }
    if (out.exit_code == kExitRankFailed) {
      KV_LOG(kError, kBench, "%s failed: %s", what.c_str(), out.message.c_str());
    }
    return out.exit_code;
  }

  // The peers harness's threshold: under 10% of the machine busy counts as idle.
  static constexpr double kQuietThreshold = 0.10;

  const GradBenchOptions& o_;
  const ResultFile& results_;
  std::vector<Row> rows_;
  int rep_ = 0;
  double quiet_wait_s_ = 0, busy_before_ = -1;
  ForeignCpuMeter meter_;
  std::chrono::steady_clock::time_point launch_start_;
};

bool WriteJsonList(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream f(path);
  f << "[\n";
  for (size_t i = 0; i < rows.size(); ++i)
    f << rows[i].dump() << (i + 1 < rows.size() ? ",\n" : "\n");
  f << "]\n";
  return static_cast<bool>(f);
}

int Main(int argc, char** argv) {
  logging::SetRole("korovod-gradbench");
  logging::ConfigureFromEnvironment(logging::Subsystem::kBench);
  // An inherited SIG_IGN would make the kernel reap our ranks itself and hide their status.
  signal(SIGCHLD, SIG_DFL);
  GradBenchUsageError error;
  bool help = false;
  std::optional<GradBenchOptions> parsed = ParseGradBenchArgs(argc, argv, &error, &help);
  if (help) {
    std::fputs(GradBenchUsageText().c_str(), stdout);
    return kExitOk;
  }
  if (!parsed) {
    KV_LOG(kError, kBench, "%s (korovod-gradbench --help for usage)", error.message.c_str());
    return kExitUsage;
  }
  const GradBenchOptions& o = *parsed;
  if (o.check_shapes) return CheckShapes();
  if (!o.render.empty()) {
    std::ifstream f(o.render);
    Row list = Row::parse(f, nullptr, /*allow_exceptions=*/false);
    if (!list.is_array()) {
      KV_LOG(kError, kBench, "%s is not a JSON list of rows", o.render.c_str());
      return kExitUsage;
    }
    std::vector<Row> rows;
    for (Row& r : list) {
      if (r.is_object() && r.contains("peer") && r.value("op", "") == "gradient_exchange") {
        rows.push_back(std::move(r));
      }
    }
    PrintTable(rows, stdout);
    return kExitOk;
  }
  if (o.print_shapes) {
    std::printf("%s\n", ResNetShapesJson(*o.print_shapes).c_str());
    return kExitOk;
  }
  if (o.peers && ::access(o.peer_script.c_str(), R_OK) != 0) {
    KV_LOG(kError, kBench, "cannot read the peer script %s (--peer-script)", o.peer_script.c_str());
    return kExitUsage;
  }

  auto results = ResultFile::Create("korovod-gradbench-rows");
  if (!results.ok()) {
    KV_LOG(kError, kBench, "%s", results.status().ToString().c_str());
    return kExitRankFailed;
  }
  Runner runner(o, *results);
  // Repeats are interleaved per model and transport, so slow drift of a shared machine hits every
  // mode alike.
  int exit_code = kExitOk;
  auto record = [&](int rc) {
    if (rc != kExitOk && exit_code != kExitRankFailed) exit_code = rc;
    return exit_code != kExitRankFailed;
  };
  for (double gap : o.gaps_us) {
    for (ResNetModel model : o.models) {
      for (TransportKind transport : o.peers_only ? std::vector<TransportKind>{} : o.transports) {
        for (int rep = 0; rep < o.repeats && exit_code != kExitRankFailed; ++rep) {
          runner.set_repeat(rep);
          for (FusionMode mode : o.modes) {
            if (!record(runner.Korovod(model, transport, mode, gap))) break;
          }
        }
      }
      for (int rep = 0; o.peers && rep < o.repeats && exit_code != kExitRankFailed; ++rep) {
        runner.set_repeat(rep);
        record(runner.Torch(model, gap));
      }
    }
  }
  if (o.table) PrintTable(runner.rows(), stdout);
  if (!o.out.empty() && !WriteJsonList(o.out, runner.rows())) {
    KV_LOG(kError, kBench, "cannot write %s", o.out.c_str());
    if (exit_code == kExitOk) exit_code = kExitRankFailed;
  }
  if (exit_code == kExitVerifyFailed) {
    KV_LOG(kError, kBench, "verification failed (see the rows with \"error\")");
  }
  return exit_code;
}

}  // namespace
}  // namespace korovod::bench

int main(int argc, char** argv) { return korovod::bench::Main(argc, argv); }
