// Reduction kernels and 16-bit float conversions: the vector paths (F16C/AVX2) must give the same
// bits as the scalar definitions, on ordinary values and on the edge cases (subnormals, rounding
// ties, overflow to infinity, NaN).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "common/data_type.h"
#include "runtime/reduce/float16_kernels.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {
namespace {

float Combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return b < a ? b : a;
    case ReduceOp::kMax:
      return a < b ? b : a;
  }
  return 0;
}

TEST(Float16, EveryHalfValueRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

TEST(Float16, RoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);  // tie: down to even
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);  // tie: up to even
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);            // largest finite
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);            // rounds to infinity
  EXPECT_EQ(FloatToHalf(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie below it: to even (zero)
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
}

TEST(BFloat16, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(FloatToBFloat16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie: even
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(FloatToBFloat16(f), b) << std::hex << b;
    }
  }
}

// Inputs that exercise every path: random bit patterns (all exponents, NaNs, infinities,
// subnormals) and a length that leaves a scalar tail after the 8-wide loop.
std::vector<uint16_t> Inputs(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(65536 + 5);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = i < 65536 ? static_cast<uint16_t>(i) : static_cast<uint16_t>(rng());
  }
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

TEST(Float16Kernels, VectorPathsMatchScalarBitForBit) {
  if (!Float16KernelsAvailable()) GTEST_SKIP() << "CPU has no AVX2+F16C: only the scalar path runs";
  const auto a = Inputs(1), b = Inputs(2);
  for (ReduceOp op : kAllReduceOps) {
    std::vector<uint16_t> half(a.size()), bf(a.size());
    ReduceHalfF16C(half.data(), a.data(), b.data(), a.size(), op);
    ReduceBFloat16Avx2(bf.data(), a.data(), b.data(), a.size(), op);
    for (size_t i = 0; i < a.size(); ++i) {
      const uint16_t want_half = FloatToHalf(Combine(op, HalfToFloat(a[i]), HalfToFloat(b[i])));
      const uint16_t want_bf =
          FloatToBFloat16(Combine(op, BFloat16ToFloat(a[i]), BFloat16ToFloat(b[i])));
      ASSERT_EQ(half[i], want_half)
          << ReduceOpName(op) << " half " << std::hex << a[i] << " " << b[i];
      ASSERT_EQ(bf[i], want_bf) << ReduceOpName(op) << " bfloat16 " << std::hex << a[i] << " "
                                << b[i];
    }
  }
  for (float factor : {0.125f, 1.0f / 3, 7.5f, 1e4f}) {
    std::vector<uint16_t> half = a, bf = a;
    ScaleHalfF16C(half.data(), half.size(), factor);
    ScaleBFloat16Avx2(bf.data(), bf.size(), factor);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(half[i], FloatToHalf(HalfToFloat(a[i]) * factor)) << factor << " " << a[i];
      ASSERT_EQ(bf[i], FloatToBFloat16(BFloat16ToFloat(a[i]) * factor)) << factor << " " << a[i];
    }
  }
}

TEST(ReduceKernels, IntegersWrapInsteadOfOverflowing) {
  int8_t a[2] = {127, -128}, b[2] = {1, -1};
  ReduceInto(a, b, 2, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(a[0], -128);
  EXPECT_EQ(a[1], 127);
  int64_t c = std::numeric_limits<int64_t>::max(), d = 2;
  ReduceInto(&c, &d, 1, DataType::kInt64, ReduceOp::kProduct);
  EXPECT_EQ(c, -2);
}

TEST(ReduceKernels, IdentityLeavesTheOtherOperandUnchanged) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      const size_t es = DataTypeSize(t);
      std::vector<uint8_t> id(3 * es), x(3 * es);
      FillIdentity(id.data(), 3, t, op);
      // x = {1, 2, 3} in type t (through float16/bfloat16 where needed).
      for (int i = 0; i < 3; ++i) {
        const double v = i + 1;
        switch (t) {
          case DataType::kUint8:
            x[i] = static_cast<uint8_t>(v);
            break;
          case DataType::kInt8:
            reinterpret_cast<int8_t*>(x.data())[i] = static_cast<int8_t>(v);
            break;
          case DataType::kInt32:
            reinterpret_cast<int32_t*>(x.data())[i] = static_cast<int32_t>(v);
            break;
          case DataType::kInt64:
            reinterpret_cast<int64_t*>(x.data())[i] = static_cast<int64_t>(v);
            break;
          case DataType::kFloat16:
            reinterpret_cast<uint16_t*>(x.data())[i] = FloatToHalf(static_cast<float>(v));
            break;
          case DataType::kBFloat16:
            reinterpret_cast<uint16_t*>(x.data())[i] = FloatToBFloat16(static_cast<float>(v));
            break;
          case DataType::kFloat32:
            reinterpret_cast<float*>(x.data())[i] = static_cast<float>(v);
            break;
          case DataType::kFloat64:
            reinterpret_cast<double*>(x.data())[i] = v;
            break;
          case DataType::kInt16:
            reinterpret_cast<int16_t*>(x.data())[i] = static_cast<int16_t>(v);
            break;
          case DataType::kUint16:
            reinterpret_cast<uint16_t*>(x.data())[i] = static_cast<uint16_t>(v);
            break;
          case DataType::kBool:  // {0, 1, 0}
            x[i] = static_cast<uint8_t>(i % 2);
            break;
        }
      }
      std::vector<uint8_t> out = id;
      ReduceInto(out.data(), x.data(), 3, t, op);
      EXPECT_EQ(out, x) << DataTypeName(t) << " " << ReduceOpName(op);
    }
  }
}

TEST(ReduceKernels, SixteenBitIntegersWrapAndCompare) {
  int16_t a[3] = {32767, -5, 7}, b[3] = {1, 3, -9};
  ReduceInto(a, b, 3, DataType::kInt16, ReduceOp::kSum);
  EXPECT_EQ(a[0], -32768);
  EXPECT_EQ(a[1], -2);
  EXPECT_EQ(a[2], -2);
  uint16_t c[2] = {65535, 300}, d[2] = {2, 40000};
  uint16_t e[2] = {65535, 300};
  ReduceInto(c, d, 2, DataType::kUint16, ReduceOp::kSum);
  EXPECT_EQ(c[0], 1);
  EXPECT_EQ(c[1], 40300);
  ReduceInto(e, d, 2, DataType::kUint16, ReduceOp::kMin);
  EXPECT_EQ(e[0], 2);
  EXPECT_EQ(e[1], 300);
  int16_t f[2] = {-300, 200}, g[2] = {200, 300};
  ReduceInto(f, g, 2, DataType::kInt16, ReduceOp::kProduct);
  EXPECT_EQ(f[0], static_cast<int16_t>(-60000));
  EXPECT_EQ(f[1], static_cast<int16_t>(60000));
  int16_t h[2] = {-7, 9};
  ScaleInPlace(h, 2, DataType::kInt16, 0.5);
  EXPECT_EQ(h[0], -3);
  EXPECT_EQ(h[1], 4);
}

TEST(ReduceKernels, BoolReducesAsLogicalOrAndAnd) {
  const uint8_t a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 1};
  const uint8_t want_or[4] = {0, 1, 1, 1}, want_and[4] = {0, 0, 0, 1};
  for (ReduceOp op : kAllReduceOps) {
    uint8_t out[4];
    ReduceTo(out, a, b, 4, DataType::kBool, op);
    const bool is_and = op == ReduceOp::kMin || op == ReduceOp::kProduct;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(out[i], is_and ? want_and[i] : want_or[i]) << ReduceOpName(op) << " " << i;
    }
  }
  uint8_t v[2] = {1, 0};
  ScaleInPlace(v, 2, DataType::kBool, 0.5);  // an average keeps the or
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[1], 0);
  ScaleInPlace(v, 2, DataType::kBool, 0.0);
  EXPECT_EQ(v[0], 0);
}

// Average divides by the set size: the correctly rounded quotient (what a trainer computes as
// sum / size), where multiplying by a rounded 1/3 would be an ulp off for some values.
TEST(ReduceKernels, DivisorGivesTheCorrectlyRoundedQuotient) {
  std::vector<float> f;
  std::vector<double> d;
  for (int i = -300; i <= 300; ++i) {
    f.push_back(static_cast<float>(i) * 1.37f);
    d.push_back(i * 1.37);
  }
  std::vector<float> fs = f;
  std::vector<double> ds = d;
  ScaleInPlace(fs.data(), fs.size(), DataType::kFloat32, 1.0, 3);
  ScaleInPlace(ds.data(), ds.size(), DataType::kFloat64, 1.0, 3);
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(fs[i], f[i] / 3.0f) << f[i];
    ASSERT_EQ(ds[i], d[i] / 3.0) << d[i];
  }
  // A postscale factor multiplies in the type first (as Horovod scales), then the division.
  float v = 10.0f;
  ScaleInPlace(&v, 1, DataType::kFloat32, 0.3, 3);
  EXPECT_EQ(v, 10.0f * static_cast<float>(0.3) / 3.0f);
  int32_t w[2] = {-7, 8};
  ScaleInPlace(w, 2, DataType::kInt32, 1.0, 3);
  EXPECT_EQ(w[0], -2);
  EXPECT_EQ(w[1], 2);
}

TEST(ReduceKernels, ScaleTruncatesIntegersTowardZero) {
  int32_t v[3] = {7, -7, 5};
  ScaleInPlace(v, 3, DataType::kInt32, 0.5);
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], -3);
  EXPECT_EQ(v[2], 2);
}

}  // namespace
}  // namespace korovod
