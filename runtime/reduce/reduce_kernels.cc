// Elementwise reduction kernels (reduce_kernels.h). Simple loops over contiguous arrays so the compiler vectorises
// them; they run on L2-resident chunks and are never the bottleneck (memory traffic and
// synchronisation are).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "runtime/reduce/float16_kernels.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {
namespace {

// How an element is loaded into the accumulation type and stored back.
template <typename T>
struct Plain {
  using Elem = T;
  using Acc = T;
  static Acc Load(T v) { return v; }
  static T Store(Acc v) { return v; }
};
struct Half {
  using Elem = uint16_t;
  using Acc = float;
  static float Load(uint16_t v) { return HalfToFloat(v); }
  static uint16_t Store(float v) { return FloatToHalf(v); }
};
struct BFloat {
  using Elem = uint16_t;
  using Acc = float;
  static float Load(uint16_t v) { return BFloat16ToFloat(v); }
  static uint16_t Store(float v) { return FloatToBFloat16(v); }
};

// Integer sums and products wrap (two's complement) instead of being undefined behaviour.
struct Sum {
  template <typename A>
  static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct Product {
  template <typename A>
  static A Apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      using W = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, U>;
      return static_cast<A>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
struct Min {
  template <typename A>
  static A Apply(A a, A b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename A>
  static A Apply(A a, A b) {
    return a < b ? b : a;
  }
};

template <typename Conv, typename F>
void Kernel(void* dst, const void* a, const void* b, size_t n) {
  using E = typename Conv::Elem;
  auto* d = static_cast<E*>(dst);
  const auto* pa = static_cast<const E*>(a);
  const auto* pb = static_cast<const E*>(b);
  if (d == pa) {  // accumulate: the common case, written without aliasing for the vectoriser
    E* __restrict acc = d;
    for (size_t i = 0; i < n; ++i)
      acc[i] = Conv::Store(F::Apply(Conv::Load(acc[i]), Conv::Load(pb[i])));
  } else if (d == pb) {
    for (size_t i = 0; i < n; ++i)
      d[i] = Conv::Store(F::Apply(Conv::Load(pa[i]), Conv::Load(d[i])));
  } else {
    E* __restrict out = d;
    for (size_t i = 0; i < n; ++i)
      out[i] = Conv::Store(F::Apply(Conv::Load(pa[i]), Conv::Load(pb[i])));
  }
}

template <typename Conv>
void ByOp(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return Kernel<Conv, Sum>(dst, a, b, n);
    case ReduceOp::kMin:
      return Kernel<Conv, Min>(dst, a, b, n);
    case ReduceOp::kMax:
      return Kernel<Conv, Max>(dst, a, b, n);
    case ReduceOp::kProduct:
      return Kernel<Conv, Product>(dst, a, b, n);
  }
}

// bool (one byte, 0 or 1) as Gloo reduces it: sum, average and max are logical or, min and product
// logical and. On 0/1 bytes these are max and min.
void ByOpBool(void* dst, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kMax:
      return Kernel<Plain<uint8_t>, Max>(dst, a, b, n);
    case ReduceOp::kMin:
    case ReduceOp::kProduct:
      return Kernel<Plain<uint8_t>, Min>(dst, a, b, n);
  }
}

template <typename T>
void ScaleTyped(T* p, size_t n, double factor, int divisor) {
  if constexpr (std::is_integral_v<T>) {
    const double d = divisor;
    for (size_t i = 0; i < n; ++i)
      p[i] = static_cast<T>(std::trunc(static_cast<double>(p[i]) * factor / d));
  } else {
    // In the type itself; the division is a real one (p * (1/3) can miss p / 3 by an ulp).
    const T f = static_cast<T>(factor);
    const T d = static_cast<T>(divisor);
    if (factor != 1.0) {
      for (size_t i = 0; i < n; ++i) p[i] *= f;
    }
    if (divisor != 1) {
      for (size_t i = 0; i < n; ++i) p[i] /= d;
    }
  }
}

template <typename Conv>
void ScaleConv(void* buf, size_t n, double factor) {
  auto* p = static_cast<typename Conv::Elem*>(buf);
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) p[i] = Conv::Store(Conv::Load(p[i]) * f);
}

template <typename T>
T IdentityOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return T(0);
    case ReduceOp::kProduct:
      return T(1);
    case ReduceOp::kMin:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::max();
    case ReduceOp::kMax:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                  : std::numeric_limits<T>::lowest();
  }
  return T(0);
}

template <typename T>
void FillTyped(void* buf, size_t n, T v) {
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = v;
}

}  // namespace


void ReduceTo(void* dst, const void* a, const void* b, size_t n, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kUint8:
      return ByOp<Plain<uint8_t>>(dst, a, b, n, op);
    case DataType::kInt8:
      return ByOp<Plain<int8_t>>(dst, a, b, n, op);
    case DataType::kInt32:
      return ByOp<Plain<int32_t>>(dst, a, b, n, op);
    case DataType::kInt64:
      return ByOp<Plain<int64_t>>(dst, a, b, n, op);
    case DataType::kFloat16:
      if (Float16KernelsAvailable()) {
        return ReduceHalfF16C(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                              static_cast<const uint16_t*>(b), n, op);
      }
      return ByOp<Half>(dst, a, b, n, op);
    case DataType::kBFloat16:
      if (Float16KernelsAvailable()) {
        return ReduceBFloat16Avx2(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                                  static_cast<const uint16_t*>(b), n, op);
      }
      return ByOp<BFloat>(dst, a, b, n, op);
    case DataType::kFloat32:
      return ByOp<Plain<float>>(dst, a, b, n, op);
    case DataType::kFloat64:
      return ByOp<Plain<double>>(dst, a, b, n, op);
    case DataType::kInt16:
      return ByOp<Plain<int16_t>>(dst, a, b, n, op);
    case DataType::kUint16:
      return ByOp<Plain<uint16_t>>(dst, a, b, n, op);
    case DataType::kBool:
      return ByOpBool(dst, a, b, n, op);
  }
}

void ReduceInto(void* dst, const void* src, size_t n, DataType type, ReduceOp op) {
  ReduceTo(dst, dst, src, n, type, op);
}

void ScaleInPlace(void* buf, size_t n, DataType type, double factor, int divisor) {
  if (factor == 1.0 && divisor == 1) return;
  switch (type) {
    case DataType::kUint8:
      return ScaleTyped(static_cast<uint8_t*>(buf), n, factor, divisor);
    case DataType::kInt8:
      return ScaleTyped(static_cast<int8_t*>(buf), n, factor, divisor);
    case DataType::kInt32:
      return ScaleTyped(static_cast<int32_t*>(buf), n, factor, divisor);
    case DataType::kInt64:
      return ScaleTyped(static_cast<int64_t*>(buf), n, factor, divisor);
    case DataType::kFloat16:
      if (Float16KernelsAvailable()) {
        return ScaleHalfF16C(static_cast<uint16_t*>(buf), n, static_cast<float>(factor / divisor));
      }
      return ScaleConv<Half>(buf, n, factor / divisor);
    case DataType::kBFloat16:
      if (Float16KernelsAvailable()) {
        return ScaleBFloat16Avx2(static_cast<uint16_t*>(buf), n,
                                 static_cast<float>(factor / divisor));
      }
      return ScaleConv<BFloat>(buf, n, factor / divisor);
    case DataType::kFloat32:
      return ScaleTyped(static_cast<float*>(buf), n, factor, divisor);
    case DataType::kFloat64:
      return ScaleTyped(static_cast<double*>(buf), n, factor, divisor);
    case DataType::kInt16:
      return ScaleTyped(static_cast<int16_t*>(buf), n, factor, divisor);
    case DataType::kUint16:
      return ScaleTyped(static_cast<uint16_t*>(buf), n, factor, divisor);
    case DataType::kBool:  // a truth value keeps its truth under any non-zero factor
      if (factor == 0.0) FillTyped(buf, n, uint8_t{0});
      return;
  }
}

void FillIdentity(void* buf, size_t n, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kUint8:
      return FillTyped(buf, n, IdentityOf<uint8_t>(op));
    case DataType::kInt8:
      return FillTyped(buf, n, IdentityOf<int8_t>(op));
    case DataType::kInt32:
      return FillTyped(buf, n, IdentityOf<int32_t>(op));
    case DataType::kInt64:
      return FillTyped(buf, n, IdentityOf<int64_t>(op));
    case DataType::kFloat16:
      return FillTyped(buf, n, FloatToHalf(IdentityOf<float>(op)));
    case DataType::kBFloat16:
      return FillTyped(buf, n, FloatToBFloat16(IdentityOf<float>(op)));
    case DataType::kFloat32:
      return FillTyped(buf, n, IdentityOf<float>(op));
    case DataType::kFloat64:
      return FillTyped(buf, n, IdentityOf<double>(op));
    case DataType::kInt16:
      return FillTyped(buf, n, IdentityOf<int16_t>(op));
    case DataType::kUint16:
      return FillTyped(buf, n, IdentityOf<uint16_t>(op));
    case DataType::kBool:  // false for or, true for and
      return FillTyped(buf, n,
                       static_cast<uint8_t>(op == ReduceOp::kMin || op == ReduceOp::kProduct));
  }
}

}  // namespace korovod
