#include "runtime/core/autotune/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <utility>

#include "runtime/core/autotune/cholesky.h"

namespace korovod::autotune {

double KernelValue(KernelType kernel, double r, double length_scale) {
  const double s = r / length_scale;
  switch (kernel) {
    case KernelType::kSquaredExponential:
      return std::exp(-0.5 * s * s);
    case KernelType::kMatern52: {
      const double t = std::sqrt(5.0) * s;
      return (1.0 + t + t * t / 3.0) * std::exp(-t);
    }
  }
  return 0.0;
}

GaussianProcess::GaussianProcess(GaussianProcessOptions options) : options_(std::move(options)) {}

double GaussianProcess::Kernel(std::span<const double> a, std::span<const double> b,
                               double length_scale) const {
  double d2 = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  return KernelValue(options_.kernel, std::sqrt(d2), length_scale);
}

bool GaussianProcess::TryFit(const std::vector<double>& y_norm, double length_scale, double noise,
                             std::vector<double>& chol, std::vector<double>& alpha,
                             double& lml) const {
  const size_t n = x_.size();
  chol.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      chol[i * n + j] = Kernel(x_[i], x_[j], length_scale);
      chol[j * n + i] = chol[i * n + j];
    }
    chol[i * n + i] += noise;
  }
  if (!CholeskyFactor(chol, n).ok()) return false;
  alpha = y_norm;
  CholeskySolve(chol, n, alpha);
  double fit = 0.0;
  double log_det = 0.0;
  for (size_t i = 0; i < n; ++i) {
    fit += y_norm[i] * alpha[i];
    log_det += std::log(chol[i * n + i]);
  }
  lml = -0.5 * fit - log_det - 0.5 * static_cast<double>(n) * std::log(2.0 * std::numbers::pi);
  return std::isfinite(lml);
}

Status GaussianProcess::Fit(const std::vector<std::vector<double>>& x,
                            const std::vector<double>& y) {
  if (x.empty() || x.size() != y.size()) {
    return InvalidArgument("gaussian process: " + std::to_string(x.size()) + " points and " +
                           std::to_string(y.size()) + " targets");
  }
  const size_t dims = x[0].size();
  for (const auto& p : x) {
    if (p.size() != dims) return InvalidArgument("gaussian process: points of mixed dimension");
  }
  if (options_.length_scales.empty() || options_.noise_variances.empty()) {
    return InvalidArgument("gaussian process: empty hyperparameter grid");
  }
  for (double v : options_.length_scales) {
    if (!(v > 0.0)) return InvalidArgument("gaussian process: length scale must be > 0");
  }
  for (double v : options_.noise_variances) {
    if (!(v >= 0.0)) return InvalidArgument("gaussian process: noise variance must be >= 0");
  }

  const size_t n = y.size();
  double mean = 0.0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (double v : y) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n);
  double scale = std::sqrt(var);
  if (!(scale > 1e-12 * std::max(1.0, std::abs(mean)))) {
    scale = std::abs(mean) > 0.0 ? std::abs(mean) : 1.0;
  }
  std::vector<double> y_norm(n);
  for (size_t i = 0; i < n; ++i) y_norm[i] = (y[i] - mean) / scale;

  x_ = x;
  double best_lml = -std::numeric_limits<double>::infinity();
  std::vector<double> chol;
  std::vector<double> alpha;
  bool found = false;
  for (double length_scale : options_.length_scales) {
    for (double noise : options_.noise_variances) {
      // A tiny jitter keeps the factorisation stable when points (nearly) coincide.
      double lml = 0.0;
      if (!TryFit(y_norm, length_scale, noise + 1e-10, chol, alpha, lml)) continue;
      if (!found || lml > best_lml) {
        found = true;
        best_lml = lml;
        chol_ = chol;
        alpha_ = alpha;
        length_scale_ = length_scale;
        noise_variance_ = noise;
      }
    }
  }
  if (!found) {
    x_.clear();
    return Internal("gaussian process: covariance is not positive definite for any " +
                    std::string("hyperparameter in the grid"));
  }
  y_mean_ = mean;
  y_scale_ = scale;
  log_marginal_likelihood_ = best_lml;
  return OkStatus();
}

GaussianProcess::Prediction GaussianProcess::Predict(std::span<const double> x) const {
  if (x_.empty()) return {0.0, 1.0};
  const size_t n = x_.size();
  std::vector<double> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = Kernel(x_[i], x, length_scale_);
  double mean = 0.0;
  for (size_t i = 0; i < n; ++i) mean += k[i] * alpha_[i];
  SolveLower(chol_, n, k);
  double explained = 0.0;
  for (double v : k) explained += v * v;
  const double var = std::max(0.0, 1.0 - explained);
  return {y_mean_ + y_scale_ * mean, y_scale_ * std::sqrt(var)};
}

}  // namespace korovod::autotune
