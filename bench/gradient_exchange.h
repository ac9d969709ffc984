// One rank of korovod-gradbench: the training-step gradient exchange on the Horovod engine.
//
// Per step (after an engine barrier, untimed): for every gradient in backward order, sleep the
// compute gap, then Submit a float32 SUM allreduce named after the parameter (in place); then wait
// for every handle. comm time = step wall time - time actually slept, i.e. the communication the
// step could not hide, engine overhead included. Steps: `warmup` untimed, then `steps` timed; in
// autotune mode first as many steps as the search needs to settle. The first and the last step
// are verified (every element of every tensor). At the end the per-step times are MAX-reduced over
// ranks through the engine and rank 0 writes one JSON row (peers schema) to the result file.
#pragma once

#include <string>
#include <vector>

#include "bench/gradbench_options.h"
#include "bench/resnet_shapes.h"
#include "bench/result_file.h"
#include "runtime/core/engine_config.h"
#include "runtime/world/world.h"

namespace korovod::bench {

struct ExchangeRun {
  ResNetModel model = ResNetModel::kResNet50;
  TransportKind transport = TransportKind::kTcp;
  FusionMode mode = FusionMode::kOn;
  double gap_us = 0;
  int warmup = 3;
  int steps = 10;
  EngineConfig engine;  // fusion/cycle/autotune/timeline already set for the mode
  int autotune_max_steps = 400;
};

// "{model}", "{transport}", "{mode}", "{gap}" replaced ("{rank}" is left to the engine).
std::string ExpandRunPath(const std::string& pattern, const ExchangeRun& run);

// The row label: "fusion-off", "fusion-on", "autotune", with "+gap200us" for a compute gap.
std::string ExchangeAlgoLabel(FusionMode mode, double gap_us);

// Returns the rank's exit status (kExitOk, kExitRankFailed, kExitVerifyFailed).
int RunExchangeRank(const ExchangeRun& run, const std::string& job_key, int rank, int listen_fd,
                    const std::vector<PeerAddress>& peers, const ResultFile& results);

}  // namespace korovod::bench
