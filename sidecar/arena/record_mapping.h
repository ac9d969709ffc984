// Record enums (arena_layout.h) to common/'s (op_type.h, reduce_op.h). The values match one
// to one; the static_asserts keep them so.
#pragma once

#include "common/op_type.h"
#include "common/reduce_op.h"
#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar {

static_assert(
    static_cast<int>(RecordOpType::kAllreduce) == static_cast<int>(OpType::kAllreduce) &&
        static_cast<int>(RecordOpType::kAllgather) == static_cast<int>(OpType::kAllgather) &&
        static_cast<int>(RecordOpType::kBroadcast) == static_cast<int>(OpType::kBroadcast) &&
        static_cast<int>(RecordOpType::kAlltoall) == static_cast<int>(OpType::kAlltoall) &&
        static_cast<int>(RecordOpType::kReduceScatter) ==
            static_cast<int>(OpType::kReduceScatter) &&
        static_cast<int>(RecordOpType::kBarrier) == static_cast<int>(OpType::kBarrier) &&
        static_cast<int>(RecordOpType::kJoin) == static_cast<int>(OpType::kJoin) &&
        kRecordOpTypeCount == static_cast<int>(OpType::kAddProcessSet),
    "RecordOpType must mirror korovod::OpType");
static_assert(static_cast<int>(RecordReduceOp::kSum) == static_cast<int>(ReduceOp::kSum) &&
                  static_cast<int>(RecordReduceOp::kAverage) ==
                      static_cast<int>(ReduceOp::kAverage) &&
                  static_cast<int>(RecordReduceOp::kMin) == static_cast<int>(ReduceOp::kMin) &&
                  static_cast<int>(RecordReduceOp::kMax) == static_cast<int>(ReduceOp::kMax) &&
                  static_cast<int>(RecordReduceOp::kProduct) ==
                      static_cast<int>(ReduceOp::kProduct),
              "RecordReduceOp must mirror korovod::ReduceOp");

inline OpType ToOpType(RecordOpType t) { return static_cast<OpType>(t); }
inline ReduceOp ToReduceOp(RecordReduceOp r) { return static_cast<ReduceOp>(r); }
inline RecordOpType ToRecordOpType(OpType t) { return static_cast<RecordOpType>(t); }
inline RecordReduceOp ToRecordReduceOp(ReduceOp r) { return static_cast<RecordReduceOp>(r); }

}  // namespace korovod::sidecar
