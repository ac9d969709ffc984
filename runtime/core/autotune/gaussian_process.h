// Gaussian process regression over the unit cube [0,1]^d: an isotropic stationary kernel (squared
// exponential or Matern 5/2, unit signal variance) plus a noise term, on targets normalised to
// zero mean and unit variance. Hyperparameters (length scale, noise variance) are fixed or chosen
// from a small grid by maximising the log marginal likelihood.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"

namespace korovod::autotune {

enum class KernelType { kSquaredExponential, kMatern52 };

struct GaussianProcessOptions {
  KernelType kernel = KernelType::kMatern52;
  // One value: fixed. Several: the pair (length scale, noise) with the largest log marginal
  // likelihood wins. Noise variances are relative to the normalised (unit) target variance.
  std::vector<double> length_scales = {0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2};
  std::vector<double> noise_variances = {1e-6, 1e-3, 1e-2, 1e-1};
};

// Kernel value at Euclidean distance r for length scale `length_scale` (1 at r = 0).
double KernelValue(KernelType kernel, double r, double length_scale);

class GaussianProcess {
 public:
  struct Prediction {
    double mean = 0.0;
    double stddev = 0.0;  // of the latent function (noise excluded), in target units
  };

  explicit GaussianProcess(GaussianProcessOptions options = {});

  // Fits the points x (each of the same dimension) to targets y. InvalidArgument on empty or
  // mismatched input or an empty/non-positive hyperparameter grid; Internal if no grid entry
  // gives a positive definite covariance.
  Status Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);

  // Posterior at `x`. Before a successful Fit: mean 0, stddev 1 (the prior).
  Prediction Predict(std::span<const double> x) const;

  size_t size() const { return x_.size(); }
  double length_scale() const { return length_scale_; }
  double noise_variance() const { return noise_variance_; }
  double log_marginal_likelihood() const { return log_marginal_likelihood_; }

 private:
  double Kernel(std::span<const double> a, std::span<const double> b, double length_scale) const;
  // Factorises the covariance for one hyperparameter pair; returns false if not positive definite.
  bool TryFit(const std::vector<double>& y_norm, double length_scale, double noise,
              std::vector<double>& chol, std::vector<double>& alpha, double& lml) const;

  GaussianProcessOptions options_;
  std::vector<std::vector<double>> x_;
  std::vector<double> chol_;   // lower Cholesky factor of K + noise I, row-major
  std::vector<double> alpha_;  // (K + noise I)^-1 y_norm
  double y_mean_ = 0.0;
  double y_scale_ = 1.0;
  double length_scale_ = 0.0;
  double noise_variance_ = 0.0;
  double log_marginal_likelihood_ = 0.0;
};

}  // namespace korovod::autotune
