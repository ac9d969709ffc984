// OpExecutor: runs one planned collective (one tensor, or several packed into the fusion buffer)
// over the data plane, and records its phases on the timeline.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "runtime/core/fusion_buffer.h"
#include "runtime/core/negotiation_messages.h"
#include "runtime/core/pending_op.h"
#include "runtime/core/serial_worker.h"
#include "runtime/core/timeline/timeline.h"
#include "runtime/world/communicator.h"
#include "runtime/world/process_set.h"

namespace korovod {

// Layouts shared by the host (OpExecutor) and device (DeviceExecutor) paths.

// Elements of one row of dimension 0: the product of the dimensions after it.
size_t RowElements(const TensorShape& trailing);

// Reducescatter of `shape`: the elements each of `set_size` ranks gets (dimension 0 split evenly,
// the first ranks one more row).
std::vector<size_t> ReduceScatterCounts(const TensorShape& shape, int set_size);

// An alltoall's element counts and output shape. Its first step exchanges each rank's row counts
// (`send_rows[j]`: rows this rank sends to set rank j) over the CPU connections.
struct AlltoallPlan {
  std::vector<int64_t> recv_rows;  // rows received from each set rank
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  TensorShape output_shape;  // every received row, then `trailing`
};
StatusOr<AlltoallPlan> PlanAlltoall(Communicator& comm, const ProcessSet& set,
                                    const std::vector<int64_t>& send_rows,
                                    const TensorShape& trailing);

class OpExecutor {
 public:
  explicit OpExecutor(Communicator& comm) : comm_(comm) {}

  void set_timeline(Timeline* timeline) { timeline_ = timeline; }
  // Pipelining of large fused allreduces (EngineConfig::fusion_pipeline); see AllreducePipelined.
  void set_pipeline(bool on) { pipeline_ = on; }
  bool pipeline() const { return pipeline_; }
  // Segments run so far by the pipeline (each also counts as a collective).
  uint64_t pipelined_segments() const { return pipelined_segments_; }
  // A fused buffer of at least twice this is pipelined in segments of about this size.
  static constexpr uint64_t kSegmentBytes = uint64_t{4} << 20;

  struct Item {
    const Response* response;
    PendingOp* op;  // null: this rank joined without the tensor and contributes the identity
    Status status;  // per-op failure (e.g. the output allocator refused)
  };
  // Where each rank's rows go in a (possibly fused) allgather.
  struct GatherLayout {
    std::vector<std::vector<int64_t>> rows;  // rows[k][r]: rows of tensor k from set rank r
    std::vector<size_t> counts;              // elements from each set rank, all tensors
    size_t total = 0;                        // elements gathered

    GatherLayout(const std::vector<Item>& items, int n);
    // Tensor k gathered: every rank's rows, then the trailing dimensions.
    TensorShape OutputShape(const std::vector<Item>& items, size_t k) const;
  };

  // Where an op's output goes (its shape recorded in the op's result): its allocator, its output
  // pointer, or the engine-kept result.
  static StatusOr<std::byte*> Output(PendingOp& op, const TensorShape& shape, size_t bytes);

  // Runs items (one collective; several only for fused allreduce/allgather, which share their
  // responses' `absent` ranks) on `set`. Outputs land in each op's result or buffer. A non-OK
  // return is a data plane failure: the communicator is broken. Adds tensor bytes moved to *bytes.
  Status Run(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes);

 private:
  Status Allreduce(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes);
  Status AllreduceUnfused(std::vector<Item>& items, AllreduceOptions& o, uint64_t* bytes);
  Status AllreduceFused(std::vector<Item>& items, AllreduceOptions& o, uint64_t* bytes);
  Status AllreducePipelined(std::vector<Item>& items, AllreduceOptions& o, uint64_t* bytes,
                            const std::vector<size_t>& cuts);
  // Packs items [begin, end) into buf, each at its 64-byte aligned offset; the reverse.
  void CopyIn(std::vector<Item>& items, size_t begin, size_t end, std::byte* buf, DataType type,
              ReduceOp op);
  void CopyOut(std::vector<Item>& items, size_t begin, size_t end, const std::byte* buf,
               DataType type);
  Status Allgather(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes);
  Status AllgatherUnfused(std::vector<Item>& items, const GatherLayout& layout,
                          AllgatherOptions& o);
  Status AllgatherFused(const ProcessSet& set, std::vector<Item>& items, const GatherLayout& layout,
                        AllgatherOptions& o);
  Status Broadcast(const ProcessSet& set, Item& item, uint64_t* bytes);
  Status Alltoall(const ProcessSet& set, Item& item, uint64_t* bytes);
  Status ReduceScatter(const ProcessSet& set, Item& item, uint64_t* bytes);

  void Start(std::vector<Item>& items, const char* activity, const std::string& args = {});
  void End(std::vector<Item>& items);

  Communicator& comm_;
  Timeline* timeline_ = nullptr;
  FusionBuffer fusion_;
  FusionBuffer fusion_next_;  // the pipeline's second buffer
  FusionBuffer identity_;
  bool pipeline_ = true;
  uint64_t pipelined_segments_ = 0;
  std::unique_ptr<SerialWorker> copier_;  // started on the first pipelined allreduce
};

}  // namespace korovod
