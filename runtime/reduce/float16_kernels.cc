#include "runtime/reduce/float16_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/data_type.h"

namespace korovod {

#if defined(__x86_64__)

bool Float16KernelsAvailable() {
  static const bool available = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return available;
}

namespace {

constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Same operand order as the scalar kernels: min/max return the second operand when unordered.
template <int kOp>
__attribute__((target("avx2,f16c"))) inline __m256 Apply8(__m256 a, __m256 b) {
  if constexpr (kOp == 0) return _mm256_add_ps(a, b);
  if constexpr (kOp == 1) return _mm256_mul_ps(a, b);
  if constexpr (kOp == 2) return _mm256_min_ps(b, a);  // b < a ? b : a
  return _mm256_max_ps(b, a);                          // a < b ? b : a
}
template <int kOp>
inline float Apply1(float a, float b) {
  if constexpr (kOp == 0) return a + b;
  if constexpr (kOp == 1) return a * b;
  if constexpr (kOp == 2) return b < a ? b : a;
  return a < b ? b : a;
}

struct HalfCodec {
  __attribute__((target("avx2,f16c"))) static __m256 Load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  __attribute__((target("avx2,f16c"))) static void Store8(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, kNearest));
  }
  static float Load1(uint16_t v) { return HalfToFloat(v); }
  static uint16_t Store1(float v) { return FloatToHalf(v); }
};

struct BFloat16Codec {
  __attribute__((target("avx2,f16c"))) static __m256 Load8(const uint16_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // Round to nearest even; NaNs become quiet NaNs with the top payload bits (FloatToBFloat16).
  __attribute__((target("avx2,f16c"))) static void Store8(uint16_t* p, __m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                              _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    // Pack 8 x u32 (each < 2^16) to 8 x u16: packus works per 128-bit lane, then gather lanes.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static float Load1(uint16_t v) { return BFloat16ToFloat(v); }
  static uint16_t Store1(float v) { return FloatToBFloat16(v); }
};

template <typename Codec, int kOp>
__attribute__((target("avx2,f16c"))) void Loop(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Codec::Store8(dst + i, Apply8<kOp>(Codec::Load8(a + i), Codec::Load8(b + i)));
  }
  for (; i < n; ++i) dst[i] = Codec::Store1(Apply1<kOp>(Codec::Load1(a[i]), Codec::Load1(b[i])));
}

template <typename Codec>
void ReduceWith(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return Loop<Codec, 0>(dst, a, b, n);
    case ReduceOp::kProduct:
      return Loop<Codec, 1>(dst, a, b, n);
    case ReduceOp::kMin:
      return Loop<Codec, 2>(dst, a, b, n);
    case ReduceOp::kMax:
      return Loop<Codec, 3>(dst, a, b, n);
  }
}

template <typename Codec>
__attribute__((target("avx2,f16c"))) void ScaleWith(uint16_t* buf, size_t n, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) Codec::Store8(buf + i, _mm256_mul_ps(Codec::Load8(buf + i), f));
  for (; i < n; ++i) buf[i] = Codec::Store1(Codec::Load1(buf[i]) * factor);
}

}  // namespace

void ReduceHalfF16C(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op) {
  ReduceWith<HalfCodec>(dst, a, b, n, op);
}
void ScaleHalfF16C(uint16_t* buf, size_t n, float factor) { ScaleWith<HalfCodec>(buf, n, factor); }
void ReduceBFloat16Avx2(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n,
                        ReduceOp op) {
  ReduceWith<BFloat16Codec>(dst, a, b, n, op);
}
void ScaleBFloat16Avx2(uint16_t* buf, size_t n, float factor) {
  ScaleWith<BFloat16Codec>(buf, n, factor);
}

#else  // no F16C outside x86-64: callers use the scalar kernels

bool Float16KernelsAvailable() { return false; }
void ReduceHalfF16C(uint16_t*, const uint16_t*, const uint16_t*, size_t, ReduceOp) {}
void ScaleHalfF16C(uint16_t*, size_t, float) {}
void ReduceBFloat16Avx2(uint16_t*, const uint16_t*, const uint16_t*, size_t, ReduceOp) {}
void ScaleBFloat16Avx2(uint16_t*, size_t, float) {}

#endif

}  // namespace korovod
