#include "runtime/core/autotune/autotuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "runtime/core/autotune/bayesian_optimizer.h"
#include "runtime/core/autotune/param_space.h"
#include "runtime/core/autotune/trial_log.h"

namespace korovod {
namespace {

Status CheckCount(const char* field, int value, int min) {
  if (value >= min) return OkStatus();
  return InvalidArgument(std::string("AutotuneOptions.") + field +
                         " must be >= " + std::to_string(min) + ", got " + std::to_string(value));
}

Status CheckBytes(const char* field, int64_t value) {
  if (value >= 0) return OkStatus();
  return InvalidArgument(std::string("AutotuneOptions.initial.") + field + " must be >= 0, got " +
                         std::to_string(value));
}

Status ValidateOptions(const AutotuneOptions& o) {
  KV_RETURN_IF_ERROR(CheckCount("warmup_samples", o.warmup_samples, 0));
  KV_RETURN_IF_ERROR(CheckCount("cycles_per_sample", o.cycles_per_sample, 1));
  KV_RETURN_IF_ERROR(CheckCount("samples_per_trial", o.samples_per_trial, 1));
  KV_RETURN_IF_ERROR(CheckCount("max_trials", o.max_trials, 1));
  KV_RETURN_IF_ERROR(CheckBytes("fusion_threshold_bytes", o.initial.fusion_threshold_bytes));
  KV_RETURN_IF_ERROR(CheckBytes("small_allreduce_max_bytes", o.initial.small_allreduce_max_bytes));
  KV_RETURN_IF_ERROR(CheckBytes("tcp_stripe_min_bytes", o.initial.tcp_stripe_min_bytes));
  if (!(o.initial.cycle_time_ms > 0.0) || !std::isfinite(o.initial.cycle_time_ms)) {
    return InvalidArgument("AutotuneOptions.initial.cycle_time_ms must be finite and > 0, got " +
                           std::to_string(o.initial.cycle_time_ms));
  }
  return OkStatus();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

}  // namespace

struct Autotuner::State {
  explicit State(const AutotuneOptions& o, autotune::BayesianOptimizerOptions bo)
      : options(o), optimizer(std::move(bo)) {}

  AutotuneOptions options;
  autotune::BayesianOptimizer optimizer;
  std::optional<autotune::TrialLog> log;

  TunableParams current;
  std::vector<double> current_point;  // current's position in [0,1]^4 (clamped)
  TunableParams best;
  double best_score = -std::numeric_limits<double>::infinity();

  int warmup_left = 0;
  uint64_t sample_bytes = 0;
  double sample_seconds = 0.0;
  int sample_cycles = 0;
  std::vector<double> trial_samples;

  int trials = 0;
  bool settled = false;

  // Logs a row; the first failure is reported once (a warning) and ends logging (tuning goes on).
  void Log(const Status& status) {
    if (status.ok()) return;
    KV_LOG(kWarning, kAutotune, "%s; trial log disabled", status.ToString().c_str());
    log.reset();
  }
};

StatusOr<std::unique_ptr<Autotuner>> Autotuner::Create(const AutotuneOptions& options) {
  KV_RETURN_IF_ERROR(ValidateOptions(options));

  autotune::BayesianOptimizerOptions bo;
  bo.dims = autotune::kTunableDims;
  bo.seed = options.seed;
  // Trial 1 runs the initial parameters; a quarter of the budget (2..8 points) then spreads over
  // the space before expected improvement takes over.
  bo.initial_design = std::clamp(options.max_trials / 4, 2, 8);

  auto state = std::make_unique<State>(options, std::move(bo));
  if (!options.log_path.empty()) {
    KV_ASSIGN_OR_RETURN(autotune::TrialLog log, autotune::TrialLog::Open(options.log_path));
    state->log.emplace(std::move(log));
  }
  state->current = options.initial;
  state->current_point = autotune::PointFromParams(options.initial);
  state->best = options.initial;
  state->warmup_left = options.warmup_samples;
  return std::unique_ptr<Autotuner>(new Autotuner(std::move(state)));
}

Autotuner::Autotuner(std::unique_ptr<State> state) : state_(std::move(state)) {}

Autotuner::~Autotuner() = default;

bool Autotuner::Record(uint64_t bytes, double seconds) {
  State& s = *state_;
  if (s.settled) return false;
  if (std::isfinite(seconds) && seconds > 0.0) s.sample_seconds += seconds;
  if (bytes == 0) return false;  // idle cycles only add their time to the sample
  s.sample_bytes += bytes;
  if (++s.sample_cycles < s.options.cycles_per_sample) return false;

  const double elapsed = s.sample_seconds;
  const double score = static_cast<double>(s.sample_bytes) / elapsed;
  s.sample_bytes = 0;
  s.sample_seconds = 0.0;
  s.sample_cycles = 0;
  if (!(elapsed > 0.0) || !std::isfinite(score)) return false;  // no usable time: not a sample
  if (s.warmup_left > 0) {
    --s.warmup_left;
    return false;
  }
  s.trial_samples.push_back(score);
  if (static_cast<int>(s.trial_samples.size()) < s.options.samples_per_trial) return false;

  // The trial is over.
  const double trial_score = Median(std::move(s.trial_samples));
  s.trial_samples.clear();
  ++s.trials;
  const bool is_best = trial_score > s.best_score;
  if (is_best) {
    s.best_score = trial_score;
    s.best = s.current;
  }
  if (s.log) s.Log(s.log->WriteTrial(s.trials, s.current, trial_score, is_best));
  // The point is always in the unit cube and the score finite, so this cannot fail.
  (void)s.optimizer.Observe(s.current_point, trial_score);

  if (s.trials >= s.options.max_trials) {
    s.current = s.best;
    s.current_point = autotune::PointFromParams(s.best);
    s.settled = true;
    if (s.log) s.Log(s.log->WriteFinal(s.best, s.best_score));
    return true;
  }
  s.current = autotune::ParamsFromPoint(s.optimizer.Suggest());
  // The GP learns where the rounded parameters really are.
  s.current_point = autotune::PointFromParams(s.current);
  return true;
}

const TunableParams& Autotuner::current() const { return state_->current; }

bool Autotuner::settled() const { return state_->settled; }

int Autotuner::trials() const { return state_->trials; }

}  // namespace korovod
