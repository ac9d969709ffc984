// Wire enums (arena_layout.h) to the engine's (op_request.h, reduce_op.h). The values match one
// to one; the static_asserts keep them so.
#pragma once

#include "common/op_type.h"
#include "common/reduce_op.h"
#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar {

static_assert(
    static_cast<int>(WireOpType::kAllreduce) == static_cast<int>(OpType::kAllreduce) &&
        static_cast<int>(WireOpType::kAllgather) == static_cast<int>(OpType::kAllgather) &&
        static_cast<int>(WireOpType::kBroadcast) == static_cast<int>(OpType::kBroadcast) &&
        static_cast<int>(WireOpType::kAlltoall) == static_cast<int>(OpType::kAlltoall) &&
        static_cast<int>(WireOpType::kReduceScatter) == static_cast<int>(OpType::kReduceScatter) &&
        static_cast<int>(WireOpType::kBarrier) == static_cast<int>(OpType::kBarrier) &&
        static_cast<int>(WireOpType::kJoin) == static_cast<int>(OpType::kJoin) &&
        kWireOpTypeCount == static_cast<int>(OpType::kAddProcessSet),
    "WireOpType must mirror korovod::OpType");
static_assert(static_cast<int>(WireReduceOp::kSum) == static_cast<int>(ReduceOp::kSum) &&
                  static_cast<int>(WireReduceOp::kAverage) ==
                      static_cast<int>(ReduceOp::kAverage) &&
                  static_cast<int>(WireReduceOp::kMin) == static_cast<int>(ReduceOp::kMin) &&
                  static_cast<int>(WireReduceOp::kMax) == static_cast<int>(ReduceOp::kMax) &&
                  static_cast<int>(WireReduceOp::kProduct) == static_cast<int>(ReduceOp::kProduct),
              "WireReduceOp must mirror korovod::ReduceOp");

inline OpType ToOpType(WireOpType t) { return static_cast<OpType>(t); }
inline ReduceOp ToReduceOp(WireReduceOp r) { return static_cast<ReduceOp>(r); }
inline WireOpType ToWireOpType(OpType t) { return static_cast<WireOpType>(t); }
inline WireReduceOp ToWireReduceOp(ReduceOp r) { return static_cast<WireReduceOp>(r); }

}  // namespace korovod::sidecar
