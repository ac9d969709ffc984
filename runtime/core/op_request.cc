#include "runtime/core/op_request.h"

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

int64_t NumElements(const TensorShape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const TensorShape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace korovod
