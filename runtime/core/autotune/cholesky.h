// Cholesky factorisation and triangular solves of a small dense symmetric positive definite
// matrix (row-major, n x n), written out by hand for the Gaussian process.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"

namespace korovod::autotune {

// Replaces `a` (row-major n x n, symmetric; only the lower triangle is read) by its lower
// triangular factor L with A = L L^T; the strict upper triangle is set to zero.
// FailedPrecondition if A is not (numerically) positive definite; `a` is then unspecified.
Status CholeskyFactor(std::vector<double>& a, size_t n);

// Solves L y = b in place (forward substitution).
void SolveLower(const std::vector<double>& l, size_t n, std::span<double> b);

// Solves L^T x = y in place (back substitution).
void SolveLowerTransposed(const std::vector<double>& l, size_t n, std::span<double> b);

// Solves A x = b in place given the factor L of A.
void CholeskySolve(const std::vector<double>& l, size_t n, std::span<double> b);

}  // namespace korovod::autotune
