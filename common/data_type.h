// Element types the engine moves and reduces.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace korovod {

enum class DataType : uint8_t {
  kUint8,
  kInt8,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  // Appended after the first eight: the values are on the sidecar wire.
  kInt16,
  kUint16,
  kBool,  // one byte, 0 or 1; sum, average and max reduce as logical or, min and product as and
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::kUint8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
    DataType::kInt16,   DataType::kUint16,   DataType::kBool};
inline constexpr DataType kLastDataType = DataType::kBool;

size_t DataTypeSize(DataType t);
const char* DataTypeName(DataType t);
std::optional<DataType> ParseDataType(std::string_view name);

// IEEE half and bfloat16 conversions (round to nearest even); 16-bit floats are reduced in
// float32 precision and rounded back once per reduction step.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
// Branch-free so that loops over arrays vectorise.
inline float BFloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7fff + ((x >> 16) & 1)) >> 16;  // nearest even
  const uint32_t quiet_nan = (x >> 16) | 0x40;
  return static_cast<uint16_t>((x & 0x7fffffff) > 0x7f800000 ? quiet_nan : rounded);
}

}  // namespace korovod
