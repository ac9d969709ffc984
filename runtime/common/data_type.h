// Element types the engine moves and reduces.
#pragma once

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
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::kUint8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};

size_t DataTypeSize(DataType t);
const char* DataTypeName(DataType t);
std::optional<DataType> ParseDataType(std::string_view name);

// IEEE half and bfloat16 conversions (round to nearest even); 16-bit floats are reduced in
// float32 precision and rounded back once per reduction step.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
inline float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}
uint16_t FloatToBFloat16(float f);

}  // namespace korovod
