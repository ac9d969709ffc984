// SidecarWorld: a korovod-bench rank's world through its korovod-sidecar, the way a trainer
// reaches the engine: the C++ client (sidecar/client), tensors allocated in the shared-memory
// arena (zero copy), every op submitted through the arena's queue and waited for. What `--via
// sidecar` measures: the in-process collective plus the sidecar hop (queues, the engine's cycle
// and negotiation, the completion back to this process).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "bench/bench_world.h"
#include "sidecar/client/client.h"

namespace korovod::bench {

class SidecarWorld final : public BenchWorld {
 public:
  // `transport` is what the sidecars were started with ("shm", "tcp"); every op's wait ends
  // with DeadlineExceeded after `op_timeout`, naming the op.
  SidecarWorld(std::unique_ptr<sidecar::Client> client, std::string transport,
               std::chrono::milliseconds op_timeout);

  int rank() const override { return client_->rank(); }
  int size() const override { return client_->size(); }
  std::string transport_label() const override { return transport_ + "+sidecar"; }
  Status Barrier() override;
  Status MaxDoubles(double* v, size_t n) override;
  StatusOr<std::unique_ptr<BenchBuffer>> Allocate(size_t bytes) override;
  // The client puts these outputs in the sidecar's result heap.
  StatusOr<std::unique_ptr<BenchBuffer>> AllocateOutput(size_t) override {
    return std::unique_ptr<BenchBuffer>();
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
  Status Wait(StatusOr<sidecar::ClientHandle> submitted);
  // Submits a result-heap op after giving the previous one's output back, so the result heap
  // holds one output at a time.
  template <typename SubmitFn>
  StatusOr<std::span<const std::byte>> ResultHeapOp(SubmitFn submit);

  std::unique_ptr<sidecar::Client> client_;
  const std::string transport_;
  const std::chrono::milliseconds op_timeout_;
  // Fixed names: from the second op on every one is a response-cache hit, as for a training
  // loop's gradients (an op named by its order would be negotiated afresh every time).
  sidecar::OpOptions barrier_, max_, op_;
  std::unique_ptr<BenchBuffer> doubles_;  // MaxDoubles' arena block, grown on demand
  sidecar::ClientHandle last_;            // the output of the last result-heap op
};

}  // namespace korovod::bench
