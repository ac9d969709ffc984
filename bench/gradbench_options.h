// Command line of korovod-gradbench: which models, transports and fusion modes to measure, the
// step counts, the engine and autotune settings, and the torch peer. Parsed in the parent before
// any rank is forked, so a bad flag costs nothing and is reported once (exit code 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/resnet_shapes.h"
#include "runtime/core/engine_config.h"
#include "runtime/world/world.h"

namespace korovod::bench {

// The engine configurations compared: Tensor Fusion disabled, enabled at a fixed threshold, and
// chosen online by the autotuner (which starts from the fixed threshold and cycle time).
enum class FusionMode { kOff, kOn, kAutotune };
const char* FusionModeName(FusionMode m);  // "off", "on", "autotune"

struct GradBenchOptions {
  std::vector<ResNetModel> models;
  std::vector<TransportKind> transports;
  std::vector<FusionMode> modes;
  std::vector<double> gaps_us;  // compute gap before each gradient; one run per value
  int ranks = 4;
  int warmup = 3;  // untimed steps before the timed ones (after autotune settled)
  int steps = 10;  // timed steps

  int64_t fusion_threshold_bytes = 64 << 20;
  double cycle_time_ms = 1.0;
  EngineConfig::Pipeline fusion_pipeline = EngineConfig::Pipeline::kAuto;
  int64_t fusion_tensor_max_bytes = -1;  // -1: the engine's default

  // Autotune: the CSV trial log ("{model}", "{transport}" and "{gap}" are replaced); the run
  // reads its "final" row to know that the search settled.
  std::string autotune_log = "/tmp/korovod-gradbench-autotune-{model}-{transport}-gap{gap}.csv";
  int autotune_warmup_samples = 2;
  int autotune_cycles_per_sample = 5;
  int autotune_samples_per_trial = 2;
  int autotune_max_trials = 12;
  int autotune_max_steps = 400;  // give up (row says "settled": false) after this many steps

  // Engine timeline per run: "{rank}" (engine), "{model}", "{transport}", "{mode}", "{gap}".
  std::string timeline;

  // torch.distributed peer (bench/peers/torch_gradient_exchange.py).
  bool peers = false;
  bool peers_only = false;
  std::string python = "/usr/bin/python3";
  std::string peer_script;
  double bucket_mib = 25;  // DDP's bucket_cap_mb
  double first_bucket_mib =
      1;  // DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)

  int repeats = 1;          // launches per configuration (interleaved); the table takes medians
  double wait_quiet_s = 0;  // before each launch, wait up to this long for an idle machine

  bool table = false;    // readable table on stdout instead of JSON rows
  std::string out;       // also write every row as a JSON list to this file
  double timeout_s = 0;  // per launch; 0: derived from the step counts

  // One-shot actions instead of a measurement.
  bool check_shapes = false;
  std::optional<ResNetModel> print_shapes;
  std::string render;  // print the table of this JSON list (an earlier --out) and exit
};

struct GradBenchUsageError {
  std::string message;
};

// std::nullopt with *error set on bad usage; *help set for --help.
std::optional<GradBenchOptions> ParseGradBenchArgs(int argc, char** argv,
                                                   GradBenchUsageError* error, bool* help);
std::string GradBenchUsageText();

}  // namespace korovod::bench
