// Bayesian optimisation over [0,1]^d, maximising a noisy score: the first points come from a
// space-filling design (a maximin Latin hypercube), then each suggestion maximises expected
// improvement under a Gaussian process fitted to every observation so far. Candidates are
// uniform random points plus Gaussian perturbations of the best point, all drawn from a seeded
// std::mt19937_64, so a run is reproducible from its seed and observations.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/status.h"
#include "runtime/core/autotune/gaussian_process.h"

namespace korovod::autotune {

struct BayesianOptimizerOptions {
  int dims = 1;
  uint64_t seed = 1;
  int initial_design = 5;        // design points suggested before the GP takes over
  int random_candidates = 2000;  // uniform candidates per suggestion
  int local_candidates = 500;    // perturbations of the best point per suggestion
  double local_stddev = 0.05;    // of the perturbations (half use a quarter of it)
  double xi = 0.01;              // improvement margin, in units of the scores' stddev
  GaussianProcessOptions gp;
};

// Expected improvement over `best` + `xi` of a normal(mean, stddev) score (maximisation).
double ExpectedImprovement(double mean, double stddev, double best, double xi);

class BayesianOptimizer {
 public:
  explicit BayesianOptimizer(BayesianOptimizerOptions options);

  // The next point to evaluate. Design points while fewer than `initial_design` observations
  // exist (and the design is not used up), then the candidate with the largest expected
  // improvement.
  std::vector<double> Suggest();

  // Records `score` (higher is better) at `x`. InvalidArgument if x has the wrong dimension, lies
  // outside the unit cube, or the score is not finite.
  Status Observe(const std::vector<double>& x, double score);

  size_t observations() const { return xs_.size(); }
  // The best observation so far (empty / -inf before the first).
  const std::vector<double>& best_point() const { return best_x_; }
  double best_score() const { return best_y_; }

 private:
  std::vector<double> RandomPoint();

  BayesianOptimizerOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> design_;
  size_t next_design_ = 0;
  std::vector<std::vector<double>> xs_;
  std::vector<double> ys_;
  std::vector<double> best_x_;
  double best_y_;
};

}  // namespace korovod::autotune
