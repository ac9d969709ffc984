// Autotuner: searches the engine's tunable parameters online from measured throughput and
// settles on the best. Runs on the coordinator only; the engine broadcasts current() to every
// rank whenever Record() says it changed.
//
// Search: Bayesian optimisation (Gaussian process over the normalised parameter space, expected
// improvement), after warm-up samples of the initial parameters. Each trial is scored by the median
// throughput (bytes / second) over `samples_per_trial` samples; every trial is one CSV row.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace korovod {

struct TunableParams {
  int64_t fusion_threshold_bytes = 64 << 20;
  double cycle_time_ms = 1.0;
  // Data plane: allreduce switches from recursive doubling to the ring at this size; TCP messages
  // of at least tcp_stripe_min_bytes are striped over all streams.
  int64_t small_allreduce_max_bytes = 32 << 10;
  int64_t tcp_stripe_min_bytes = 256 << 10;
};

struct AutotuneOptions {
  TunableParams initial;
  std::string log_path;        // CSV, one row per trial; empty: no log
  int warmup_samples = 3;      // samples discarded before the first trial
  int cycles_per_sample = 10;  // engine cycles that moved data, per sample
  int samples_per_trial = 3;   // a trial's score is the median over these
  int max_trials = 24;         // then settle on the best trial's parameters
  uint64_t seed = 1;           // reproducible candidate sampling
};

class Autotuner {
 public:
  static StatusOr<std::unique_ptr<Autotuner>> Create(const AutotuneOptions& options);
  ~Autotuner();

  // One engine cycle that moved `bytes` (sum of tensor bytes of all collectives it ran) in
  // `seconds` (wall time since the previous recorded cycle ended). Returns true when current()
  // changed (a new trial starts, or the search settled on the best).
  bool Record(uint64_t bytes, double seconds);

  const TunableParams& current() const;
  bool settled() const;
  int trials() const;

 private:
  struct State;
  explicit Autotuner(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace korovod
