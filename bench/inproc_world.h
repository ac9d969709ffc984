// InprocWorld: a korovod-bench rank's world in its own process: the collectives of
// runtime/collectives on a Communicator, buffers on the heap. What `--via inproc` measures.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_world.h"
#include "runtime/world/communicator.h"

namespace korovod::bench {

class InprocWorld final : public BenchWorld {
 public:
  // `label_suffix`: appended to the transport's name in the rows ("+encrypt").
  explicit InprocWorld(Communicator& comm, std::string label_suffix = "")
      : comm_(comm), label_suffix_(std::move(label_suffix)) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::string transport_label() const override {
    return comm_.transport_name() + label_suffix_;
  }
  Status Barrier() override;
  Status MaxDoubles(double* v, size_t n) override;
  StatusOr<std::unique_ptr<BenchBuffer>> Allocate(size_t bytes) override;
  StatusOr<std::unique_ptr<BenchBuffer>> AllocateOutput(size_t bytes) override {
    return Allocate(bytes);
  }
  Status Allreduce(BenchBuffer& buf, size_t count, DataType type, AllreduceAlgorithm algo) override;
  Status Broadcast(BenchBuffer& buf, size_t count, DataType type, int root) override;
  StatusOr<std::span<const std::byte>> Allgather(BenchBuffer& in, BenchBuffer* out, size_t block,
                                                 DataType type) override;
  StatusOr<std::span<const std::byte>> Alltoall(BenchBuffer& in, BenchBuffer* out, size_t block,
                                                DataType type) override;
  StatusOr<std::span<const std::byte>> ReduceScatter(BenchBuffer& in, BenchBuffer* out,
                                                     size_t block, DataType type) override;

 private:
  Communicator& comm_;
  std::string label_suffix_;
  std::vector<size_t> counts_;  // N equal blocks, kept so the timed ops allocate nothing
};

}  // namespace korovod::bench
