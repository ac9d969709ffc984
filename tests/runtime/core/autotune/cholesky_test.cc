#include "runtime/core/autotune/cholesky.h"

#include <gtest/gtest.h>

#include <vector>

namespace korovod::autotune {
namespace {

TEST(Cholesky, FactorsKnownMatrix) {
  // A = L L^T with L = [[2,0,0],[6,1,0],[-8,5,3]].
  std::vector<double> a = {4, 12, -16, 12, 37, -43, -16, -43, 98};
  ASSERT_TRUE(CholeskyFactor(a, 3).ok());
  const std::vector<double> expected = {2, 0, 0, 6, 1, 0, -8, 5, 3};
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], expected[i], 1e-12) << "entry " << i;
}

TEST(Cholesky, SolvesSystem) {
  std::vector<double> a = {4, 12, -16, 12, 37, -43, -16, -43, 98};
  const std::vector<double> original = a;
  const std::vector<double> x = {1.5, -2.0, 0.25};
  std::vector<double> b(3, 0.0);
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = 0; j < 3; ++j) b[i] += original[i * 3 + j] * x[j];
  }
  ASSERT_TRUE(CholeskyFactor(a, 3).ok());
  CholeskySolve(a, 3, b);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(b[i], x[i], 1e-10);
}

TEST(Cholesky, TriangularSolves) {
  const std::vector<double> l = {2, 0, 6, 1};  // [[2,0],[6,1]]
  std::vector<double> b = {4, 13};             // L y = b: y = (2, 1)
  SolveLower(l, 2, b);
  EXPECT_DOUBLE_EQ(b[0], 2.0);
  EXPECT_DOUBLE_EQ(b[1], 1.0);
  std::vector<double> c = {14, 1};  // L^T x = c with L^T = [[2,6],[0,1]]: x = (4, 1)
  SolveLowerTransposed(l, 2, c);
  EXPECT_DOUBLE_EQ(c[0], 4.0);
  EXPECT_DOUBLE_EQ(c[1], 1.0);
}

TEST(Cholesky, RejectsIndefiniteMatrix) {
  std::vector<double> a = {1, 2, 2, 1};  // eigenvalues 3 and -1
  const Status s = CholeskyFactor(a, 2);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  std::vector<double> wrong_size = {1, 0, 0};
  EXPECT_EQ(CholeskyFactor(wrong_size, 2).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace korovod::autotune
