#include "runtime/core/autotune/gaussian_process.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace korovod::autotune {
namespace {

double Target(double x, double y) { return 5.0 + 3.0 * std::sin(4.0 * x) * std::cos(3.0 * y); }

class GaussianProcessKernels : public ::testing::TestWithParam<KernelType> {};

TEST_P(GaussianProcessKernels, InterpolatesAndUncertaintyGrowsAwayFromData) {
  GaussianProcessOptions o;
  o.kernel = GetParam();
  o.length_scales = {0.3};
  o.noise_variances = {1e-8};
  GaussianProcess gp(o);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (double a : {0.1, 0.3, 0.5}) {
    for (double b : {0.1, 0.3, 0.5}) {
      x.push_back({a, b});
      y.push_back(Target(a, b));
    }
  }
  ASSERT_TRUE(gp.Fit(x, y).ok());
  EXPECT_DOUBLE_EQ(gp.length_scale(), 0.3);
  for (size_t i = 0; i < x.size(); ++i) {
    const auto p = gp.Predict(x[i]);
    EXPECT_NEAR(p.mean, y[i], 1e-3) << "point " << i;
    EXPECT_LT(p.stddev, 1e-2) << "point " << i;
  }
  // Uncertainty grows with the distance from the data (the data lie in [0.1,0.5]^2).
  const double at_data = gp.Predict(std::vector<double>{0.3, 0.3}).stddev;
  const double near = gp.Predict(std::vector<double>{0.4, 0.4}).stddev;
  const double mid = gp.Predict(std::vector<double>{0.7, 0.7}).stddev;
  const double far = gp.Predict(std::vector<double>{1.0, 1.0}).stddev;
  EXPECT_LT(at_data, near);
  EXPECT_LT(near, mid);
  EXPECT_LT(mid, far);
  // Far away the posterior returns to the prior: stddev of the targets, mean near their mean.
  double mean = 0.0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  double var = 0.0;
  for (double v : y) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(y.size()));
  EXPECT_GT(far, 0.8 * sd);
  EXPECT_LE(far, sd * (1.0 + 1e-9));
  // Between training points the mean follows the smooth target.
  EXPECT_NEAR(gp.Predict(std::vector<double>{0.2, 0.2}).mean, Target(0.2, 0.2), 0.3);
}

INSTANTIATE_TEST_SUITE_P(Kernels, GaussianProcessKernels,
                         ::testing::Values(KernelType::kSquaredExponential, KernelType::kMatern52),
                         [](const auto& info) {
                           return info.param == KernelType::kMatern52 ? "matern52"
                                                                      : "squared_exponential";
                         });

TEST(GaussianProcess, KernelValues) {
  EXPECT_DOUBLE_EQ(KernelValue(KernelType::kSquaredExponential, 0.0, 0.2), 1.0);
  EXPECT_DOUBLE_EQ(KernelValue(KernelType::kMatern52, 0.0, 0.2), 1.0);
  EXPECT_NEAR(KernelValue(KernelType::kSquaredExponential, 0.2, 0.2), std::exp(-0.5), 1e-15);
  const double t = std::sqrt(5.0);
  EXPECT_NEAR(KernelValue(KernelType::kMatern52, 0.2, 0.2), (1 + t + t * t / 3) * std::exp(-t),
              1e-15);
}

TEST(GaussianProcess, GridSearchPrefersLikelyLengthScale) {
  // A slowly varying function on a dense set: a tiny length scale explains it far worse.
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i <= 20; ++i) {
    const double v = i / 20.0;
    x.push_back({v});
    y.push_back(std::sin(2.0 * v));
  }
  GaussianProcessOptions o;
  o.length_scales = {0.02, 0.5};
  o.noise_variances = {1e-6};
  GaussianProcess gp(o);
  ASSERT_TRUE(gp.Fit(x, y).ok());
  EXPECT_DOUBLE_EQ(gp.length_scale(), 0.5);

  GaussianProcessOptions fixed = o;
  fixed.length_scales = {0.02};
  GaussianProcess worse(fixed);
  ASSERT_TRUE(worse.Fit(x, y).ok());
  EXPECT_LT(worse.log_marginal_likelihood(), gp.log_marginal_likelihood());
}

TEST(GaussianProcess, NoisyDataAreSmoothed) {
  // Repeated points with different targets need the noise term; the mean is their average.
  std::vector<std::vector<double>> x = {{0.5}, {0.5}, {0.5}, {0.5}};
  std::vector<double> y = {1.0, 3.0, 1.0, 3.0};
  GaussianProcess gp;  // default grid
  ASSERT_TRUE(gp.Fit(x, y).ok());
  EXPECT_GT(gp.noise_variance(), 0.0);
  EXPECT_NEAR(gp.Predict(std::vector<double>{0.5}).mean, 2.0, 0.1);
}

TEST(GaussianProcess, ConstantTargetsAndPrior) {
  GaussianProcess gp;
  const auto prior = gp.Predict(std::vector<double>{0.5});
  EXPECT_EQ(prior.mean, 0.0);
  EXPECT_EQ(prior.stddev, 1.0);
  ASSERT_TRUE(gp.Fit({{0.2}, {0.8}}, {7.0, 7.0}).ok());
  EXPECT_NEAR(gp.Predict(std::vector<double>{0.5}).mean, 7.0, 1e-9);
}

TEST(GaussianProcess, RejectsBadInput) {
  GaussianProcess gp;
  EXPECT_EQ(gp.Fit({}, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gp.Fit({{0.1}}, {1.0, 2.0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gp.Fit({{0.1}, {0.1, 0.2}}, {1.0, 2.0}).code(), StatusCode::kInvalidArgument);
  GaussianProcessOptions o;
  o.length_scales = {};
  EXPECT_EQ(GaussianProcess(o).Fit({{0.1}}, {1.0}).code(), StatusCode::kInvalidArgument);
  o.length_scales = {-1.0};
  EXPECT_EQ(GaussianProcess(o).Fit({{0.1}}, {1.0}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace korovod::autotune
