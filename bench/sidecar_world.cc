#include "bench/sidecar_world.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace korovod::bench {
namespace {

class ArenaBlock final : public BenchBuffer {
 public:
  explicit ArenaBlock(sidecar::ArenaBuffer b) : buffer_(std::move(b)) {}
  std::byte* data() override { return buffer_.data(); }
  size_t size() const override { return buffer_.size(); }
  const sidecar::ArenaBuffer& arena() const { return buffer_; }

 private:
  sidecar::ArenaBuffer buffer_;
};

// Every buffer a SidecarWorld is given came from its own Allocate.
const sidecar::ArenaBuffer& ArenaOf(BenchBuffer& b) { return static_cast<ArenaBlock&>(b).arena(); }

sidecar::OpOptions Named(const char* name) {
  sidecar::OpOptions o;
  o.name = name;
  return o;
}

TensorShape Shape(size_t count) { return {static_cast<int64_t>(count)}; }

}  // namespace

SidecarWorld::SidecarWorld(std::unique_ptr<sidecar::Client> client, std::string transport,
                           std::chrono::milliseconds op_timeout)
    : client_(std::move(client)),
      transport_(std::move(transport)),
      op_timeout_(op_timeout),
      barrier_(Named("korovod-bench.barrier")),
      max_(Named("korovod-bench.max")),
      op_(Named("korovod-bench.op")) {
  max_.reduce_op = ReduceOp::kMax;
}

Status SidecarWorld::Wait(StatusOr<sidecar::ClientHandle> submitted) {
  if (!submitted.ok()) return submitted.status();
  return submitted->Wait(Deadline::After(op_timeout_));
}

Status SidecarWorld::Barrier() { return Wait(client_->Barrier(barrier_)); }

Status SidecarWorld::MaxDoubles(double* v, size_t n) {
  const size_t bytes = n * sizeof(double);
  if (!doubles_ || doubles_->size() < bytes) {
    KV_ASSIGN_OR_RETURN(doubles_, Allocate(bytes));
  }
  std::memcpy(doubles_->data(), v, bytes);
  const sidecar::ArenaBuffer& b = ArenaOf(*doubles_);
  KV_RETURN_IF_ERROR(Wait(client_->Allreduce(b, b, DataType::kFloat64, Shape(n), max_)));
  std::memcpy(v, doubles_->data(), bytes);
  return OkStatus();
}

StatusOr<std::unique_ptr<BenchBuffer>> SidecarWorld::Allocate(size_t bytes) {
  KV_ASSIGN_OR_RETURN(sidecar::ArenaBuffer b, client_->Allocate(bytes));
  // First touch here, on this side of the arena: the timed ops find the pages mapped.
  std::memset(b.data(), 0, bytes);
  return std::unique_ptr<BenchBuffer>(new ArenaBlock(std::move(b)));
}

Status SidecarWorld::Allreduce(BenchBuffer& buf, size_t count, DataType type, AllreduceAlgorithm) {
  const sidecar::ArenaBuffer& b = ArenaOf(buf);
  return Wait(client_->Allreduce(b, b, type, Shape(count), op_));
}

Status SidecarWorld::Broadcast(BenchBuffer& buf, size_t count, DataType type, int root) {
  op_.root = root;
  return Wait(client_->Broadcast(ArenaOf(buf), type, Shape(count), op_));
}

template <typename SubmitFn>
StatusOr<std::span<const std::byte>> SidecarWorld::ResultHeapOp(SubmitFn submit) {
  last_ = sidecar::ClientHandle();
  KV_ASSIGN_OR_RETURN(sidecar::ClientHandle h, submit());
  KV_RETURN_IF_ERROR(h.Wait(Deadline::After(op_timeout_)));
  last_ = std::move(h);
  return last_.output();
}

StatusOr<std::span<const std::byte>> SidecarWorld::Allgather(BenchBuffer& in, BenchBuffer*,
                                                             size_t block, DataType type) {
  return ResultHeapOp([&] { return client_->Allgather(ArenaOf(in), type, Shape(block), op_); });
}

StatusOr<std::span<const std::byte>> SidecarWorld::Alltoall(BenchBuffer& in, BenchBuffer*,
                                                            size_t block, DataType type) {
  const std::vector<int64_t> splits(size(), static_cast<int64_t>(block));
  return ResultHeapOp(
      [&] { return client_->Alltoall(ArenaOf(in), type, Shape(block * size()), splits, op_); });
}

StatusOr<std::span<const std::byte>> SidecarWorld::ReduceScatter(BenchBuffer& in, BenchBuffer*,
                                                                 size_t block, DataType type) {
  return ResultHeapOp(
      [&] { return client_->ReduceScatter(ArenaOf(in), type, Shape(block * size()), op_); });
}

}  // namespace korovod::bench
