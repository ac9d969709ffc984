// OpExecutor: runs one planned collective (one tensor, or several packed into the fusion buffer)
// over the data plane, and records its phases on the timeline.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "runtime/core/fusion_buffer.h"
#include "runtime/core/negotiation_messages.h"
#include "runtime/core/pending_op.h"
#include "runtime/core/timeline/timeline.h"
#include "runtime/world/communicator.h"
#include "runtime/world/process_set.h"

namespace korovod {

class OpExecutor {
 public:
  explicit OpExecutor(Communicator& comm) : comm_(comm) {}

  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

  struct Item {
    const Response* response;
    PendingOp* op;  // null: this rank joined without the tensor and contributes the identity
    Status status;  // per-op failure (e.g. the output allocator refused)
  };
  // Runs items (one collective; several only for fused allreduce/allgather, which share their
  // responses' `absent` ranks) on `set`. Outputs land in each op's result or buffer. A non-OK
  // return is a data plane failure: the communicator is broken. Adds tensor bytes moved to *bytes.
  Status Run(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes);

 private:
  Status Allreduce(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes);
  Status AllreduceUnfused(std::vector<Item>& items, AllreduceOptions& o, uint64_t* bytes);
  Status AllreduceFused(std::vector<Item>& items, AllreduceOptions& o, uint64_t* bytes);
  Status Allgather(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes);
  struct GatherLayout;
  Status AllgatherUnfused(std::vector<Item>& items, const GatherLayout& layout,
                          AllgatherOptions& o);
  Status AllgatherFused(const ProcessSet& set, std::vector<Item>& items, const GatherLayout& layout,
                        AllgatherOptions& o);
  Status Broadcast(const ProcessSet& set, Item& item, uint64_t* bytes);
  Status Alltoall(const ProcessSet& set, Item& item, uint64_t* bytes);
  Status ReduceScatter(const ProcessSet& set, Item& item, uint64_t* bytes);

  // Where an op's output goes: its allocator, its output pointer, or the engine-kept result.
  StatusOr<std::byte*> Output(PendingOp& op, const TensorShape& shape, size_t bytes);
  void Start(std::vector<Item>& items, const char* activity, const std::string& args = {});
  void End(std::vector<Item>& items);

  Communicator& comm_;
  Timeline* timeline_ = nullptr;
  FusionBuffer fusion_;
  FusionBuffer identity_;
};

}  // namespace korovod
