// NumElements and NumBytes: shapes come from other processes, so a negative dimension or a
// product past 64 bits is -1 (never a wrapped count that sizes a buffer).
#include "common/tensor_shape.h"

#include <gtest/gtest.h>

#include <limits>

namespace korovod {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(TensorShapeTest, CountsElements) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({3, 4}), 12);
  EXPECT_EQ(NumElements({3, 0, 4}), 0);
  EXPECT_EQ(NumElements({kMax}), kMax);
  EXPECT_EQ(NumBytes({3, 4}, 8), 96);
  EXPECT_EQ(NumBytes({}, 2), 2);
  EXPECT_EQ(NumBytes({0, 7}, 4), 0);
}

TEST(TensorShapeTest, NegativeDimensionIsInvalid) {
  EXPECT_EQ(NumElements({-1}), -1);
  EXPECT_EQ(NumElements({4, -2}), -1);
  EXPECT_EQ(NumElements({0, -2}), -1);
  EXPECT_EQ(NumBytes({-3}, 1), -1);
}

TEST(TensorShapeTest, OverflowIsDetected) {
  // 2^32 x 2^32 wraps to 0 in 64 bits; 3 x 2^62 wraps to a positive number.
  EXPECT_EQ(NumElements({int64_t{1} << 32, int64_t{1} << 32}), -1);
  EXPECT_EQ(NumElements({3, int64_t{1} << 62}), -1);
  EXPECT_EQ(NumElements({kMax, 2}), -1);
  // A zero dimension does not hide an overflow of the others (partial products are computed).
  EXPECT_EQ(NumElements({int64_t{1} << 40, 0, int64_t{1} << 40}), -1);
  // Elements fit, bytes do not.
  EXPECT_EQ(NumElements({int64_t{1} << 61}), int64_t{1} << 61);
  EXPECT_EQ(NumBytes({int64_t{1} << 61}, 4), -1);
  EXPECT_EQ(NumBytes({int64_t{1} << 60}, 4), int64_t{1} << 62);
}

}  // namespace
}  // namespace korovod
