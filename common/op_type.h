// The kinds of tensor operation a trainer submits, named the same in every layer.
#pragma once

#include <cstdint>

namespace korovod {

enum class OpType : uint8_t {
  kAllreduce,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReduceScatter,
  kBarrier,
  kJoin,
  kAddProcessSet,     // engine-internal: registers a process set on every rank at the same point
  kRemoveProcessSet,  // engine-internal: drops a process set on every rank at the same point
};
const char* OpTypeName(OpType t);  // "ALLREDUCE", ...

}  // namespace korovod
