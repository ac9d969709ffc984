#include "runtime/core/autotune/bayesian_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <random>
#include <vector>

namespace korovod::autotune {
namespace {

using Objective = std::function<double(const std::vector<double>&)>;

// A smooth bump with its maximum 1 at `center`.
Objective Bump(std::vector<double> center, double width) {
  return [center, width](const std::vector<double>& x) {
    double d2 = 0.0;
    for (size_t i = 0; i < x.size(); ++i) d2 += (x[i] - center[i]) * (x[i] - center[i]);
    return std::exp(-d2 / (2 * width * width));
  };
}

// A narrow peak (maximum ~1 near (0.72, 0.23)) and a lower, broad decoy hill of height 0.5.
double PeakAndDecoy(const std::vector<double>& x) {
  const double d2 = (x[0] - 0.72) * (x[0] - 0.72) + (x[1] - 0.23) * (x[1] - 0.23);
  const double e2 = (x[0] - 0.2) * (x[0] - 0.2) + (x[1] - 0.8) * (x[1] - 0.8);
  return std::exp(-d2 / (2 * 0.15 * 0.15)) + 0.5 * std::exp(-e2 / (2 * 0.3 * 0.3));
}

double RunBayesian(const Objective& f, int dims, int budget, uint64_t seed) {
  BayesianOptimizerOptions o;
  o.dims = dims;
  o.seed = seed;
  o.initial_design = std::max(2, budget / 4);
  BayesianOptimizer bo(o);
  for (int i = 0; i < budget; ++i) {
    const std::vector<double> x = bo.Suggest();
    EXPECT_EQ(x.size(), static_cast<size_t>(dims));
    for (double v : x) {
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
    }
    EXPECT_TRUE(bo.Observe(x, f(x)).ok());
  }
  EXPECT_EQ(bo.observations(), static_cast<size_t>(budget));
  return bo.best_score();
}

// Mean over many runs of the best value random search finds with the same budget.
double MeanRandomSearch(const Objective& f, int dims, int budget) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr int kRuns = 200;
  double total = 0.0;
  for (int r = 0; r < kRuns; ++r) {
    double best = -1e300;
    for (int i = 0; i < budget; ++i) {
      std::vector<double> x(dims);
      for (double& v : x) v = u(rng);
      best = std::max(best, f(x));
    }
    total += best;
  }
  return total / kRuns;
}

// Every seed: the regret (optimum - best found) is under a tenth of random search's mean regret.
void ExpectBeatsRandomSearch(const Objective& f, int dims, int budget, double max_regret) {
  const double optimum = 1.0;
  const double random_regret = optimum - MeanRandomSearch(f, dims, budget);
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const double bo_regret = optimum - RunBayesian(f, dims, budget, seed);
    EXPECT_LT(bo_regret, 0.1 * random_regret)
        << "seed " << seed << ": bayesian regret " << bo_regret << ", mean random search regret "
        << random_regret;
    EXPECT_LT(bo_regret, max_regret) << "seed " << seed;
  }
}

TEST(BayesianOptimizer, Beats2DRandomSearch) {
  ExpectBeatsRandomSearch(Bump({0.72, 0.23}, 0.15), 2, 20, 0.01);
}

TEST(BayesianOptimizer, Beats4DRandomSearch) {
  ExpectBeatsRandomSearch(Bump({0.65, 0.3, 0.8, 0.45}, 0.2), 4, 30, 0.02);
}

TEST(BayesianOptimizer, Beats4DRandomSearchOnTiltedQuadratic) {
  const Objective f = [](const std::vector<double>& x) {
    const double a = x[0] - 0.65, b = x[1] - 0.3, c = x[2] - 0.8, d = x[3] - 0.45;
    return 1.0 - (4 * (a + b) * (a + b) + (a - b) * (a - b) + 2 * c * c + d * d);
  };
  ExpectBeatsRandomSearch(f, 4, 30, 0.02);
}

TEST(BayesianOptimizer, BeatsRandomSearchOnAverageWithDecoy) {
  // The search may settle on the decoy hill now and then, but not often.
  const double optimum = 1.0;
  const double random_regret = optimum - MeanRandomSearch(PeakAndDecoy, 2, 20);
  double total = 0.0;
  constexpr int kSeeds = 10;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    total += optimum - RunBayesian(PeakAndDecoy, 2, 20, seed);
  }
  EXPECT_LT(total / kSeeds, 0.25 * random_regret);
}

TEST(BayesianOptimizer, DesignIsSpaceFillingLatinHypercube) {
  BayesianOptimizerOptions o;
  o.dims = 3;
  o.initial_design = 6;
  BayesianOptimizer bo(o);
  std::vector<std::vector<double>> design;
  for (int i = 0; i < 6; ++i) {
    design.push_back(bo.Suggest());
    ASSERT_TRUE(bo.Observe(design.back(), 0.0).ok());
  }
  // One point per sixth of each axis.
  for (int d = 0; d < 3; ++d) {
    std::vector<int> strata;
    for (const auto& p : design) strata.push_back(static_cast<int>(p[d] * 6));
    std::sort(strata.begin(), strata.end());
    EXPECT_EQ(strata, (std::vector<int>{0, 1, 2, 3, 4, 5})) << "dimension " << d;
  }
}

TEST(BayesianOptimizer, ReproducibleFromSeed) {
  const Objective f = Bump({0.3, 0.6}, 0.2);
  auto run = [&](uint64_t seed) {
    BayesianOptimizerOptions o;
    o.dims = 2;
    o.seed = seed;
    BayesianOptimizer bo(o);
    std::vector<std::vector<double>> xs;
    for (int i = 0; i < 10; ++i) {
      xs.push_back(bo.Suggest());
      EXPECT_TRUE(bo.Observe(xs.back(), f(xs.back())).ok());
    }
    return xs;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(BayesianOptimizer, ExpectedImprovement) {
  EXPECT_DOUBLE_EQ(ExpectedImprovement(2.0, 0.0, 1.0, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(ExpectedImprovement(0.5, 0.0, 1.0, 0.0), 0.0);
  // At mean == best: stddev * pdf(0).
  EXPECT_NEAR(ExpectedImprovement(1.0, 2.0, 1.0, 0.0), 2.0 / std::sqrt(2.0 * std::numbers::pi),
              1e-12);
  // More uncertainty, more expected improvement; a higher mean likewise.
  EXPECT_LT(ExpectedImprovement(0.0, 0.1, 1.0, 0.0), ExpectedImprovement(0.0, 1.0, 1.0, 0.0));
  EXPECT_LT(ExpectedImprovement(0.0, 0.5, 1.0, 0.0), ExpectedImprovement(0.5, 0.5, 1.0, 0.0));
}

TEST(BayesianOptimizer, RejectsBadObservations) {
  BayesianOptimizerOptions o;
  o.dims = 2;
  BayesianOptimizer bo(o);
  EXPECT_EQ(bo.Observe({0.5}, 1.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bo.Observe({0.5, 1.5}, 1.0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bo.Observe({0.5, 0.5}, std::nan("")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bo.observations(), 0u);
  ASSERT_TRUE(bo.Observe({0.5, 0.5}, 3.0).ok());
  ASSERT_TRUE(bo.Observe({0.1, 0.5}, 2.0).ok());
  EXPECT_EQ(bo.best_score(), 3.0);
  EXPECT_EQ(bo.best_point(), (std::vector<double>{0.5, 0.5}));
}

}  // namespace
}  // namespace korovod::autotune
