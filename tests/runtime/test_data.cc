#include "tests/runtime/test_data.h"
#include "runtime/reduce/reduce_kernels.h"

#include <array>
#include <cmath>
#include <cstring>
#include <sstream>

namespace korovod::testing {
namespace {

constexpr uint64_t kIndexStride = 0xd1b54a32d192ed03ull;
constexpr uint64_t kRankStride = 0x8cb92ba72f3d8dd7ull;
constexpr uint64_t kStreamStride = 0xaef17502108ef2d9ull;

// 16-bit float encodings of the small integers the generators produce.
constexpr int kLutMin = -256;
constexpr int kLutMax = 256;
struct HalfLut {
  std::array<uint16_t, kLutMax - kLutMin + 1> half;
  std::array<uint16_t, kLutMax - kLutMin + 1> bf16;
  HalfLut() {
    for (int v = kLutMin; v <= kLutMax; ++v) {
      half[v - kLutMin] = FloatToHalf(static_cast<float>(v));
      bf16[v - kLutMin] = FloatToBFloat16(static_cast<float>(v));
    }
  }
};
const HalfLut& Lut() {
  static const HalfLut lut;
  return lut;
}

template <typename T>
void StoreInt(void* buf, size_t i, int v) {
  static_cast<T*>(buf)[i] = static_cast<T>(v);
}

// Calls f(typed_store) where typed_store(buf, i, int v) writes an integer-valued element.
template <typename F>
void WithIntStore(DataType t, F&& f) {
  switch (t) {
    case DataType::kUint8:
      return f([](void* b, size_t i, int v) { StoreInt<uint8_t>(b, i, v); });
    case DataType::kInt8:
      return f([](void* b, size_t i, int v) { StoreInt<int8_t>(b, i, v); });
    case DataType::kInt32:
      return f([](void* b, size_t i, int v) { StoreInt<int32_t>(b, i, v); });
    case DataType::kInt64:
      return f([](void* b, size_t i, int v) { StoreInt<int64_t>(b, i, v); });
    case DataType::kFloat16:
      return f([](void* b, size_t i, int v) {
        static_cast<uint16_t*>(b)[i] = (v >= kLutMin && v <= kLutMax)
                                           ? Lut().half[v - kLutMin]
                                           : FloatToHalf(static_cast<float>(v));
      });
    case DataType::kBFloat16:
      return f([](void* b, size_t i, int v) {
        static_cast<uint16_t*>(b)[i] = (v >= kLutMin && v <= kLutMax)
                                           ? Lut().bf16[v - kLutMin]
                                           : FloatToBFloat16(static_cast<float>(v));
      });
    case DataType::kFloat32:
      return f([](void* b, size_t i, int v) { StoreInt<float>(b, i, v); });
    case DataType::kFloat64:
      return f([](void* b, size_t i, int v) { StoreInt<double>(b, i, v); });
    case DataType::kInt16:
      return f([](void* b, size_t i, int v) { StoreInt<int16_t>(b, i, v); });
    case DataType::kUint16:
      return f([](void* b, size_t i, int v) { StoreInt<uint16_t>(b, i, v); });
    case DataType::kBool:
      return f([](void* b, size_t i, int v) { StoreInt<uint8_t>(b, i, v != 0); });
  }
}

// The value a data-movement test stores for MoveValue() v: unsigned types shift it to [0, 200],
// bool keeps its lowest bit.
int MoveStored(DataType t, int v) {
  if (t == DataType::kUint8 || t == DataType::kUint16) return v + 100;
  if (t == DataType::kBool) return v & 1;
  return v;
}

int MantissaBits(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return 10;
    case DataType::kBFloat16:
      return 7;
    case DataType::kFloat32:
      return 23;
    case DataType::kFloat64:
      return 52;
    default:
      return 0;
  }
}

std::string FormatValue(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

bool IsSigned(DataType t) {
  return t != DataType::kUint8 && t != DataType::kUint16 && t != DataType::kBool;
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

int ReduceInput(uint64_t seed, ReduceOp op, DataType t, int rank, int size, size_t index) {
  const uint64_t h = Mix(seed + index * kIndexStride + static_cast<uint64_t>(rank) * kRankStride);
  const bool sign = IsSigned(t);
  if (t == DataType::kBool) {  // 0 or 1; products (logical and) are 1 but on one rank
    if (op != ReduceOp::kProduct) return static_cast<int>(h & 1);
    const int designated =
        static_cast<int>(Mix(~seed + index * kIndexStride) % static_cast<uint64_t>(size));
    return rank == designated ? static_cast<int>(h & 1) : 1;
  }
  if (op != ReduceOp::kProduct) {
    return sign ? static_cast<int>(h % 5) - 2 : static_cast<int>(h % 3) + 1;
  }
  const int designated =
      static_cast<int>(Mix(~seed + index * kIndexStride) % static_cast<uint64_t>(size));
  if (rank == designated) {
    static constexpr int kSigned[] = {-3, -2, 0, 2, 3};
    static constexpr int kUnsigned[] = {0, 2, 3};
    return sign ? kSigned[h % 5] : kUnsigned[h % 3];
  }
  return sign ? ((h & 1) ? 1 : -1) : 1;
}

int MoveValue(uint64_t seed, int source, int stream, size_t index) {
  const uint64_t h = Mix(seed + index * kIndexStride + static_cast<uint64_t>(source) * kRankStride +
                         static_cast<uint64_t>(stream) * kStreamStride);
  // [-100, 100]: exact in every type except uint8, which gets [0, 200] through the wrap below.
  return static_cast<int>(h % 201) - 100;
}

void StoreElement(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::kUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      return;
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToBFloat16(static_cast<float>(v));
      return;
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      return;
    case DataType::kInt16:
      static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v);
      return;
    case DataType::kUint16:
      static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v);
      return;
    case DataType::kBool:
      static_cast<uint8_t*>(buf)[i] = v != 0;
      return;
  }
}

double LoadElement(DataType t, const void* buf, size_t i) {
  switch (t) {
    case DataType::kUint8:
      return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(buf)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(buf)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(buf)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(buf)[i];
    case DataType::kUint16:
      return static_cast<const uint16_t*>(buf)[i];
    case DataType::kBool:  // the raw byte, so that a non-0/1 result shows
      return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

void FillReduceInput(void* buf, size_t count, DataType t, uint64_t seed, ReduceOp op, int rank,
                     int size, size_t first) {
  WithIntStore(t, [&](auto store) {
    for (size_t i = 0; i < count; ++i) {
      store(buf, i, ReduceInput(seed, op, t, rank, size, first + i));
    }
  });
}

void FillMoveValues(void* buf, size_t count, DataType t, uint64_t seed, int source, int stream) {
  WithIntStore(t, [&](auto store) {
    for (size_t i = 0; i < count; ++i) {
      store(buf, i, MoveStored(t, MoveValue(seed, source, stream, i)));
    }
  });
}

void FillGarbage(void* buf, size_t bytes) {
  if (bytes > 0) std::memset(buf, 0x7d, bytes);  // 0x7d7d: a float16 NaN, not a small integer
}

double ExpectedReduction(const ReduceSpec& spec, size_t index) {
  if (spec.type == DataType::kBool) {  // or (sum, average, max) or and (min, product)
    const bool is_and = spec.op == ReduceOp::kMin || spec.op == ReduceOp::kProduct;
    bool acc = is_and;
    for (int r = 0; r < spec.size; ++r) {
      const bool v = ReduceInput(spec.seed, spec.op, spec.type, r, spec.size, index) != 0 &&
                     spec.prescale != 0.0;
      acc = is_and ? (acc && v) : (acc || v);
    }
    return acc && spec.postscale != 0.0 ? 1 : 0;
  }
  const bool is_int = !IsFloat(spec.type);
  auto scale = [&](double v, double factor) {
    if (factor == 1.0) return v;
    return is_int ? std::trunc(v * factor) : v * factor;
  };
  double acc = 0;
  for (int r = 0; r < spec.size; ++r) {
    const double v =
        scale(ReduceInput(spec.seed, spec.op, spec.type, r, spec.size, index), spec.prescale);
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (spec.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  if (spec.op == ReduceOp::kAverage) {
    return is_int ? std::trunc(acc * spec.postscale / spec.size) : acc * spec.postscale / spec.size;
  }
  return scale(acc, spec.postscale);
}

double ReduceTolerance(const ReduceSpec& spec, double expected) {
  if (!IsFloat(spec.type) || spec.op != ReduceOp::kAverage) return 0;
  return std::ldexp(std::fabs(expected), 1 - MantissaBits(spec.type));
}

std::string CheckReduction(const ReduceSpec& spec, const void* out, size_t count, size_t first) {
  size_t bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < count; ++i) {
    const double want = ExpectedReduction(spec, first + i);
    const double got = LoadElement(spec.type, out, i);
    if (std::fabs(got - want) <= ReduceTolerance(spec, want)) continue;  // NaN fails here
    if (bad < 4) {
      os << (bad ? "; " : "") << "element " << first + i << ": expected " << FormatValue(want)
         << " got " << FormatValue(got);
    }
    ++bad;
  }
  if (bad == 0) return "";
  os << " (" << bad << " of " << count << " elements wrong)";
  return os.str();
}

std::string CheckMoveValues(const void* out, size_t count, DataType t, uint64_t seed, int source,
                            int stream) {
  size_t bad = 0;
  std::ostringstream os;
  for (size_t i = 0; i < count; ++i) {
    const double want = MoveStored(t, MoveValue(seed, source, stream, i));
    const double got = LoadElement(t, out, i);
    if (got == want) continue;
    if (bad < 4) {
      os << (bad ? "; " : "") << "element " << i << ": expected " << FormatValue(want) << " got "
         << FormatValue(got);
    }
    ++bad;
  }
  if (bad == 0) return "";
  os << " (" << bad << " of " << count << " elements wrong)";
  return os.str();
}

uint64_t Digest(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x6a09e667f3bcc908ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < bytes) std::memcpy(&tail, p + i, bytes - i);
  return Mix(h ^ tail);
}

std::vector<size_t> SplitCounts(size_t total, int parts, bool uneven) {
  std::vector<size_t> counts(parts, 0);
  if (!uneven || parts == 1) {
    for (int j = 0; j < parts; ++j) {
      counts[j] = total / parts + (static_cast<size_t>(j) < total % parts ? 1 : 0);
    }
    return counts;
  }
  std::vector<size_t> weight(parts);
  size_t weight_sum = 0;
  int last = 0;
  for (int j = 0; j < parts; ++j) {
    weight[j] = j % 3 == 1 ? 0 : (j % 3 == 0 ? 1 : 3);
    weight_sum += weight[j];
    if (weight[j]) last = j;
  }
  size_t given = 0;
  for (int j = 0; j < parts; ++j) {
    counts[j] = total * weight[j] / weight_sum;
    given += counts[j];
  }
  counts[last] += total - given;
  return counts;
}

size_t AlltoallCount(size_t per_rank, int size, int from, int to, bool uneven) {
  if (!uneven) {
    return per_rank / size + (static_cast<size_t>(to) < per_rank % size ? 1 : 0);
  }
  if (per_rank == 0) return 0;
  const size_t w = static_cast<size_t>(from * 3 + to * 5 + 1) % 4;  // 0 for some pairs
  if (w == 0) return 0;
  return per_rank / size * w / 2 + static_cast<size_t>(from + 2 * to) % 3;
}

}  // namespace korovod::testing
