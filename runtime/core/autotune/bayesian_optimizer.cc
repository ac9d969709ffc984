#include "runtime/core/autotune/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <string>
#include <utility>

namespace korovod::autotune {
namespace {

// Latin hypercube of n points in [0,1]^dims: every dimension's n strata hold one point each.
std::vector<std::vector<double>> LatinHypercube(int n, int dims, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<double>> points(n, std::vector<double>(dims));
  std::vector<int> perm(n);
  for (int d = 0; d < dims; ++d) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < n; ++i) points[i][d] = (perm[i] + u(rng)) / n;
  }
  return points;
}

double MinPairDistance2(const std::vector<std::vector<double>>& points) {
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < points.size(); ++i) {
    for (size_t j = i + 1; j < points.size(); ++j) {
      double d2 = 0.0;
      for (size_t k = 0; k < points[i].size(); ++k) {
        d2 += (points[i][k] - points[j][k]) * (points[i][k] - points[j][k]);
      }
      best = std::min(best, d2);
    }
  }
  return best;
}

}  // namespace

double ExpectedImprovement(double mean, double stddev, double best, double xi) {
  const double gain = mean - best - xi;
  if (!(stddev > 0.0)) return std::max(gain, 0.0);
  const double z = gain / stddev;
  const double cdf = 0.5 * std::erfc(-z / std::numbers::sqrt2);
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * std::numbers::pi);
  return gain * cdf + stddev * pdf;
}

BayesianOptimizer::BayesianOptimizer(BayesianOptimizerOptions options)
    : options_(std::move(options)),
      rng_(options_.seed),
      best_y_(-std::numeric_limits<double>::infinity()) {
  options_.dims = std::max(options_.dims, 1);
  options_.initial_design = std::max(options_.initial_design, 0);
  options_.random_candidates = std::max(options_.random_candidates, 1);
  options_.local_candidates = std::max(options_.local_candidates, 0);
  // Maximin: the best spread of a few random Latin hypercubes.
  double best_spread = -1.0;
  for (int attempt = 0; attempt < 32 && options_.initial_design > 0; ++attempt) {
    auto design = LatinHypercube(options_.initial_design, options_.dims, rng_);
    const double spread = MinPairDistance2(design);
    if (spread > best_spread) {
      best_spread = spread;
      design_ = std::move(design);
    }
  }
}

std::vector<double> BayesianOptimizer::RandomPoint() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> p(options_.dims);
  for (double& v : p) v = u(rng_);
  return p;
}

std::vector<double> BayesianOptimizer::Suggest() {
  if (xs_.size() < static_cast<size_t>(options_.initial_design) && next_design_ < design_.size()) {
    return design_[next_design_++];
  }
  if (xs_.empty()) return RandomPoint();

  GaussianProcess gp(options_.gp);
  if (!gp.Fit(xs_, ys_).ok()) return RandomPoint();

  double mean = 0.0;
  for (double y : ys_) mean += y;
  mean /= static_cast<double>(ys_.size());
  double var = 0.0;
  for (double y : ys_) var += (y - mean) * (y - mean);
  double spread = std::sqrt(var / static_cast<double>(ys_.size()));
  if (!(spread > 0.0)) spread = std::abs(best_y_) > 0.0 ? std::abs(best_y_) : 1.0;
  const double xi = options_.xi * spread;

  std::vector<double> best_candidate;
  double best_ei = -1.0;
  auto consider = [&](std::vector<double> p) {
    const GaussianProcess::Prediction pred = gp.Predict(p);
    const double ei = ExpectedImprovement(pred.mean, pred.stddev, best_y_, xi);
    if (ei > best_ei) {
      best_ei = ei;
      best_candidate = std::move(p);
    }
  };
  for (int i = 0; i < options_.random_candidates; ++i) consider(RandomPoint());
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int i = 0; i < options_.local_candidates; ++i) {
    const double sigma = (i % 2 == 0) ? options_.local_stddev : 0.25 * options_.local_stddev;
    std::vector<double> p = best_x_;
    for (double& v : p) v = std::clamp(v + sigma * normal(rng_), 0.0, 1.0);
    consider(std::move(p));
  }
  return best_candidate;
}

Status BayesianOptimizer::Observe(const std::vector<double>& x, double score) {
  if (x.size() != static_cast<size_t>(options_.dims)) {
    return InvalidArgument("bayesian optimizer: point of dimension " + std::to_string(x.size()) +
                           ", expected " + std::to_string(options_.dims));
  }
  for (double v : x) {
    if (!(v >= 0.0 && v <= 1.0)) {
      return InvalidArgument("bayesian optimizer: point outside the unit cube");
    }
  }
  if (!std::isfinite(score)) return InvalidArgument("bayesian optimizer: score is not finite");
  xs_.push_back(x);
  ys_.push_back(score);
  if (score > best_y_) {
    best_y_ = score;
    best_x_ = x;
  }
  return OkStatus();
}

}  // namespace korovod::autotune
