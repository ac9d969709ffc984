// Reduction operators: what a trainer asks for and every layer names. The kernels that apply
// them live in runtime/reduce/reduce_kernels.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/data_type.h"

namespace korovod {

enum class ReduceOp : uint8_t { kSum, kAverage, kMin, kMax, kProduct };

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kProduct};

const char* ReduceOpName(ReduceOp op);
std::optional<ReduceOp> ParseReduceOp(std::string_view name);

}  // namespace korovod
