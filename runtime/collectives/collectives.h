// The collectives of the in-process C++ API. Each takes the communicator and an options struct,
// so call sites read like sentences and new knobs do not break signatures (gloo's shape).
//
// All collectives on one Communicator must be issued from one thread at a time, and every member
// of the set must issue the same sequence of collectives on that set.
#pragma once

#include <cstddef>
#include <span>

#include "common/data_type.h"
#include "common/reduce_op.h"
#include "common/status.h"
#include "runtime/world/process_set.h"

namespace korovod {

class Communicator;

// kSharedMemory needs the shm transport's windows; kAuto takes it there above the small-message
// crossover, and the ring over TCP. kHierarchical needs a communicator whose hierarchy is on
// (Communicator::hierarchy) and the world set; kAuto takes it there above the crossover.
enum class AllreduceAlgorithm { kAuto, kRing, kRecursiveDoubling, kSharedMemory, kHierarchical };
const char* AllreduceAlgorithmName(AllreduceAlgorithm a);

struct AllreduceOptions {
  const void* input = nullptr;  // may equal output (in place)
  void* output = nullptr;
  size_t count = 0;  // elements
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;            // applied to every rank's input before reduction
  double postscale = 1.0;           // applied to the result (Average adds 1/size)
  const ProcessSet* set = nullptr;  // null: the world
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
};
Status Allreduce(Communicator& comm, const AllreduceOptions& opts);

// Every rank contributes `counts[set_rank]` elements; output holds all contributions in set-rank
// order (sum of counts elements).
struct AllgatherOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::span<const size_t> counts;  // elements per set rank
  DataType type = DataType::kFloat32;
  const ProcessSet* set = nullptr;
};
Status Allgather(Communicator& comm, const AllgatherOptions& opts);

struct BroadcastOptions {
  void* buffer = nullptr;  // input on the root, output elsewhere
  size_t count = 0;
  DataType type = DataType::kFloat32;
  int root = 0;  // set rank
  const ProcessSet* set = nullptr;
};
Status Broadcast(Communicator& comm, const BroadcastOptions& opts);

// send_counts[j]: elements this rank sends to set rank j (contiguous in input, in rank order);
// recv_counts[j]: elements it receives from set rank j (contiguous in output, in rank order).
struct AlltoallOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::span<const size_t> send_counts;
  std::span<const size_t> recv_counts;
  DataType type = DataType::kFloat32;
  const ProcessSet* set = nullptr;
};
Status Alltoall(Communicator& comm, const AlltoallOptions& opts);

// Reduces input (sum of recv_counts elements on every rank) and leaves block j, recv_counts[j]
// elements, on set rank j.
struct ReduceScatterOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::span<const size_t> recv_counts;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  const ProcessSet* set = nullptr;
};
Status ReduceScatter(Communicator& comm, const ReduceScatterOptions& opts);

Status Barrier(Communicator& comm, const ProcessSet* set = nullptr);

}  // namespace korovod
