#include "runtime/core/autotune/cholesky.h"

#include <cmath>
#include <string>

namespace korovod::autotune {

Status CholeskyFactor(std::vector<double>& a, size_t n) {
  if (a.size() != n * n) {
    return InvalidArgument("cholesky: matrix has " + std::to_string(a.size()) +
                           " entries, expected " + std::to_string(n * n));
  }
  for (size_t j = 0; j < n; ++j) {
    double diag = a[j * n + j];
    for (size_t k = 0; k < j; ++k) diag -= a[j * n + k] * a[j * n + k];
    if (!(diag > 0.0) || !std::isfinite(diag)) {
      return FailedPrecondition("cholesky: matrix is not positive definite (pivot " +
                                std::to_string(j) + ")");
    }
    const double ljj = std::sqrt(diag);
    a[j * n + j] = ljj;
    for (size_t i = j + 1; i < n; ++i) {
      double v = a[i * n + j];
      for (size_t k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / ljj;
    }
    for (size_t i = 0; i < j; ++i) a[i * n + j] = 0.0;
  }
  return OkStatus();
}

void SolveLower(const std::vector<double>& l, size_t n, std::span<double> b) {
  for (size_t i = 0; i < n; ++i) {
    double v = b[i];
    for (size_t k = 0; k < i; ++k) v -= l[i * n + k] * b[k];
    b[i] = v / l[i * n + i];
  }
}

void SolveLowerTransposed(const std::vector<double>& l, size_t n, std::span<double> b) {
  for (size_t i = n; i-- > 0;) {
    double v = b[i];
    for (size_t k = i + 1; k < n; ++k) v -= l[k * n + i] * b[k];
    b[i] = v / l[i * n + i];
  }
}

void CholeskySolve(const std::vector<double>& l, size_t n, std::span<double> b) {
  SolveLower(l, n, b);
  SolveLowerTransposed(l, n, b);
}

}  // namespace korovod::autotune
