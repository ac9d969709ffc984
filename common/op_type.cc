#include "common/op_type.h"

namespace korovod {

const char* OpTypeName(OpType t) {
  switch (t) {
    case OpType::kAllreduce:
      return "ALLREDUCE";
    case OpType::kAllgather:
      return "ALLGATHER";
    case OpType::kBroadcast:
      return "BROADCAST";
    case OpType::kAlltoall:
      return "ALLTOALL";
    case OpType::kReduceScatter:
      return "REDUCESCATTER";
    case OpType::kBarrier:
      return "BARRIER";
    case OpType::kJoin:
      return "JOIN";
    case OpType::kAddProcessSet:
      return "ADD_PROCESS_SET";
    case OpType::kRemoveProcessSet:
      return "REMOVE_PROCESS_SET";
  }
  return "UNKNOWN";
}

}  // namespace korovod
