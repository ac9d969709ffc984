// What a trainer submits to the engine: one named tensor operation, and what it gets back.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "common/op_type.h"
#include "common/tensor_shape.h"
#include "common/status.h"
#include "common/reduce_op.h"

namespace korovod {

// Allocates the output of an op whose output shape is known only after negotiation (allgather,
// alltoall) and returns where to write it; the memory must stay valid until completion.
using OutputAllocator = std::function<StatusOr<void*>(const TensorShape& shape)>;

struct OpRequest {
  OpType type = OpType::kAllreduce;
  std::string name;  // identifies the tensor across ranks: every rank submits the same names
  DataType dtype = DataType::kFloat32;
  TensorShape shape;
  const void* input = nullptr;
  // Allreduce/broadcast: shape-sized (may equal input). Reducescatter: this rank's block, the
  // first dimension split evenly over the set (the first ranks get one more row). Allgather and
  // alltoall: leave null to have the engine keep the output (OpResult::data), or set allocate.
  void* output = nullptr;
  OutputAllocator allocate;

  ReduceOp op = ReduceOp::kSum;  // allreduce, reducescatter
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;                  // broadcast: set rank of the root
  std::vector<int64_t> splits;   // alltoall: rows of the first dimension sent to each set rank
  int process_set = 0;           // 0: the world
  // -1: input and output are host memory. >= 0: they are memory of that device (its ordinal in
  // this process); the engine runs the op through its DeviceBackend (allreduce and broadcast).
  int device = -1;
  // Engine-internal: add-process-set: the new set's ranks; remove-process-set: {the set's id}.
  std::vector<int32_t> members;
};

struct OpResult {
  TensorShape shape;            // output shape (allgather and alltoall learn it on completion)
  std::vector<std::byte> data;  // engine-kept output (allgather/alltoall without allocate)
  std::vector<int64_t> received_splits;  // alltoall: rows received from each set rank
  int last_joined_rank = -1;             // join: the rank that joined last
  int process_set_id = -1;               // add-process-set: the new set's id
};

}  // namespace korovod
