#include "bench/gradbench_options.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "bench/bench_options.h"

#ifndef KOROVOD_SOURCE_DIR
#define KOROVOD_SOURCE_DIR "."
#endif

namespace korovod::bench {
namespace {

std::optional<double> ParseDouble(std::string_view text, double min) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(v) || v < min) {
    return std::nullopt;
  }
  return v;
}

std::optional<int> ParseCount(std::string_view text, int min) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < min) return std::nullopt;
  return v;
}

}  // namespace

const char* FusionModeName(FusionMode m) {
  switch (m) {
    case FusionMode::kOff:
      return "off";
    case FusionMode::kOn:
      return "on";
    case FusionMode::kAutotune:
      return "autotune";
  }
  return "unknown";
}

std::string GradBenchUsageText() {
  return R"(usage: korovod-gradbench [flags]
       korovod-gradbench --check-shapes
       korovod-gradbench --print-shapes MODEL

Training-step gradient exchange through the Horovod engine: per step every rank submits one
float32 SUM allreduce per ResNet parameter, in backward order, then waits for all of them. Ranks
are forked on 127.0.0.1 (one process each). One JSON row per model x transport x mode x gap.

flags:
  --models LIST           resnet50,resnet101 (default both)
  --transport LIST        tcp,shm (default both)
  --modes LIST            off,on,autotune (default all): fusion threshold 0 / fixed / autotuned
  --ranks N               world size (default 4)
  --warmup K              untimed steps before the timed ones (default 3)
  --steps K               timed steps (default 10)
  --compute-gap-us LIST   sleep before each gradient's submit, one run per value (default 0)
  --fusion-threshold B    mode on and autotune's start, bytes, K/M/G suffixes (default 64M)
  --cycle-time-ms MS      engine cycle (default 1)
  --fusion-pipeline auto|on|off  segments of large fused buffers overlap their copies
                          (KOROVOD_FUSION_PIPELINE; default auto)
  --fusion-tensor-max B   tensors of at least B bytes run unfused; 0: fuse all (default: the
                          engine's, 1M)
  --autotune-log PATH     trial CSV; {model} {transport} {gap} are replaced
                          (default /tmp/korovod-gradbench-autotune-{model}-{transport}-gap{gap}.csv)
  --autotune-warmup K     warm-up samples (default 2)
  --autotune-cycles K     data cycles per sample (default 5)
  --autotune-samples K    samples per trial (default 2)
  --autotune-trials K     trials before settling (default 12)
  --autotune-max-steps K  steps to wait for the search to settle (default 400)
  --timeline PATH         engine timeline per run; {rank} {model} {transport} {mode} {gap}
  --peers                 also run bench/peers/torch_gradient_exchange.py (torch.distributed
                          gloo, per-tensor and DDP-style bucketed) on the same shapes and steps
  --peers-only            only the torch peer
  --python PATH           interpreter for the peer (default /usr/bin/python3)
  --peer-script PATH      default: the source tree's bench/peers/torch_gradient_exchange.py
  --bucket-mb MB          peer bucket cap (default 25, DDP's bucket_cap_mb)
  --first-bucket-mb MB    peer first bucket (default 1, like DDP)
  --repeats R             launches per configuration, interleaved (default 1); the table
                          shows the median over launches
  --wait-quiet S          before each launch wait up to S s for the machine to be idle
                          (< 10% busy over 1 s); rows carry quiet_wait_s, busy_before and
                          foreign_cpu_frac (CPU used by other processes during the launch)
  --table                 print a readable table with the speedups instead of JSON rows
  --out FILE              also write all rows as one JSON list
  --render FILE           print the table of FILE (a JSON list written by --out) and exit
  --timeout S             kill the ranks when one launch takes longer (default: from steps)
  --check-shapes          check the ResNet shapes against torchvision's counts, exit 0/1
  --print-shapes MODEL    print MODEL's gradient shapes (backward order) as JSON
  --help

exit status: 0 ok, 1 a rank failed or hung (the message names it) or --check-shapes found a
             mismatch, 2 bad usage, 3 a verification failed (the row carries "error").
)";
}

std::optional<GradBenchOptions> ParseGradBenchArgs(int argc, char** argv,
                                                   GradBenchUsageError* error, bool* help) {
  *help = false;
  auto fail = [&](std::string msg) -> std::optional<GradBenchOptions> {
    error->message = std::move(msg);
    return std::nullopt;
  };
  GradBenchOptions o;
  o.models = {ResNetModel::kResNet50, ResNetModel::kResNet101};
  o.transports = {TransportKind::kTcp, TransportKind::kShm};
  o.modes = {FusionMode::kOff, FusionMode::kOn, FusionMode::kAutotune};
  o.gaps_us = {0};
  o.peer_script = std::string(KOROVOD_SOURCE_DIR) + "/bench/peers/torch_gradient_exchange.py";

  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return std::nullopt;
    }
    if (a == "--table") {
      o.table = true;
      continue;
    }
    if (a == "--peers") {
      o.peers = true;
      continue;
    }
    if (a == "--peers-only") {
      o.peers = o.peers_only = true;
      continue;
    }
    if (a == "--check-shapes") {
      o.check_shapes = true;
      continue;
    }
    static const char* const kValueFlags[] = {"--models",
                                              "--model",
                                              "--transport",
                                              "--transports",
                                              "--modes",
                                              "--mode",
                                              "--ranks",
                                              "--warmup",
                                              "--steps",
                                              "--compute-gap-us",
                                              "--fusion-threshold",
                                              "--cycle-time-ms",
                                              "--fusion-pipeline",
                                              "--fusion-tensor-max",
                                              "--autotune-log",
                                              "--autotune-warmup",
                                              "--autotune-cycles",
                                              "--autotune-samples",
                                              "--autotune-trials",
                                              "--autotune-max-steps",
                                              "--timeline",
                                              "--python",
                                              "--peer-script",
                                              "--bucket-mb",
                                              "--first-bucket-mb",
                                              "--out",
                                              "--timeout",
                                              "--print-shapes",
                                              "--repeats",
                                              "--wait-quiet",
                                              "--render"};
    if (std::find(std::begin(kValueFlags), std::end(kValueFlags), a) == std::end(kValueFlags)) {
      return fail("unknown flag '" + std::string(a) + "'");
    }
    if (i + 1 >= argc) return fail("missing value for " + std::string(a));
    const std::string_view v = argv[++i];
    auto bad = [&](const char* what) {
      return fail("bad " + std::string(a) + " '" + std::string(v) + "' (" + what + ")");
    };
    auto count = [&](int min, int* dst) -> bool {
      auto k = ParseCount(v, min);
      if (k) *dst = *k;
      return k.has_value();
    };
    if (a == "--models" || a == "--model") {
      o.models.clear();
      for (std::string_view tok : SplitCsv(v)) {
        auto m = ParseResNet(tok);
        if (!m) return bad("resnet50, resnet101");
        o.models.push_back(*m);
      }
      if (o.models.empty()) return bad("resnet50, resnet101");
    } else if (a == "--transport" || a == "--transports") {
      std::string token;
      auto t = ParseChoiceList<TransportKind>(
          v, {{"tcp", TransportKind::kTcp}, {"shm", TransportKind::kShm}}, &token);
      if (!t) return bad("tcp, shm");
      o.transports = *t;
    } else if (a == "--modes" || a == "--mode") {
      std::string token;
      auto m = ParseChoiceList<FusionMode>(
          v,
          {{"off", FusionMode::kOff}, {"on", FusionMode::kOn}, {"autotune", FusionMode::kAutotune}},
          &token);
      if (!m) return bad("off, on, autotune");
      o.modes = *m;
    } else if (a == "--ranks") {
      if (!count(2, &o.ranks) || o.ranks > 64) return bad("2..64");
    } else if (a == "--warmup") {
      if (!count(0, &o.warmup)) return bad("integer >= 0");
    } else if (a == "--steps") {
      if (!count(1, &o.steps)) return bad("integer >= 1");
    } else if (a == "--compute-gap-us") {
      o.gaps_us.clear();
      for (std::string_view tok : SplitCsv(v)) {
        auto g = ParseDouble(tok, 0);
        if (!g) return bad("microseconds >= 0, comma list");
        o.gaps_us.push_back(*g);
      }
      if (o.gaps_us.empty()) return bad("microseconds >= 0, comma list");
    } else if (a == "--fusion-threshold") {
      auto b = ParseSize(v);
      if (!b || *b == 0 || *b > (size_t{1} << 40)) return bad("bytes > 0, e.g. 64M");
      o.fusion_threshold_bytes = static_cast<int64_t>(*b);
    } else if (a == "--cycle-time-ms") {
      auto ms = ParseDouble(v, 0);
      if (!ms || *ms <= 0) return bad("milliseconds > 0");
      o.cycle_time_ms = *ms;
    } else if (a == "--fusion-pipeline") {
      if (v != "on" && v != "off" && v != "auto") return bad("auto, on or off");
      o.fusion_pipeline = v == "on"    ? EngineConfig::Pipeline::kOn
                          : v == "off" ? EngineConfig::Pipeline::kOff
                                       : EngineConfig::Pipeline::kAuto;
    } else if (a == "--fusion-tensor-max") {
      auto b = ParseSize(v);
      if (!b || *b > (size_t{1} << 40)) return bad("bytes >= 0, e.g. 1M");
      o.fusion_tensor_max_bytes = static_cast<int64_t>(*b);
    } else if (a == "--autotune-log") {
      if (v.empty()) return bad("a file path");
      o.autotune_log = v;
    } else if (a == "--autotune-warmup") {
      if (!count(0, &o.autotune_warmup_samples)) return bad("integer >= 0");
    } else if (a == "--autotune-cycles") {
      if (!count(1, &o.autotune_cycles_per_sample)) return bad("integer >= 1");
    } else if (a == "--autotune-samples") {
      if (!count(1, &o.autotune_samples_per_trial)) return bad("integer >= 1");
    } else if (a == "--autotune-trials") {
      if (!count(1, &o.autotune_max_trials)) return bad("integer >= 1");
    } else if (a == "--autotune-max-steps") {
      if (!count(1, &o.autotune_max_steps)) return bad("integer >= 1");
    } else if (a == "--timeline") {
      o.timeline = v;
    } else if (a == "--python") {
      o.python = v;
    } else if (a == "--peer-script") {
      o.peer_script = v;
    } else if (a == "--bucket-mb" || a == "--first-bucket-mb") {
      auto mb = ParseDouble(v, 0);
      if (!mb || *mb <= 0) return bad("MiB > 0");
      (a == "--bucket-mb" ? o.bucket_mib : o.first_bucket_mib) = *mb;
    } else if (a == "--out") {
      o.out = v;
    } else if (a == "--timeout") {
      auto s = ParseDouble(v, 0);
      if (!s || *s <= 0) return bad("seconds > 0");
      o.timeout_s = *s;
    } else if (a == "--repeats") {
      if (!count(1, &o.repeats)) return bad("integer >= 1");
    } else if (a == "--wait-quiet") {
      auto w = ParseDouble(v, 0);
      if (!w) return bad("seconds >= 0");
      o.wait_quiet_s = *w;
    } else if (a == "--render") {
      o.render = v;
    } else if (a == "--print-shapes") {
      auto m = ParseResNet(v);
      if (!m) return bad("resnet50, resnet101");
      o.print_shapes = *m;
    }
  }
  return o;
}

}  // namespace korovod::bench
