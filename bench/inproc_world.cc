#include "bench/inproc_world.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace korovod::bench {
namespace {

// Page-aligned like the peers' posix_memalign(4096): vector loads and the shm copies then never
// straddle a page because of where the buffer happened to start.
class AlignedBuffer final : public BenchBuffer {
 public:
  static StatusOr<std::unique_ptr<BenchBuffer>> Allocate(size_t bytes) {
    constexpr size_t kAlign = 4096;
    const size_t rounded = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded));
    if (p == nullptr) {
      return Internal("cannot allocate " + std::to_string(bytes) + " bytes for a benchmark buffer");
    }
    // Zeroing is the first touch (the peers memset too).
    std::memset(p, 0, rounded);
    return std::unique_ptr<BenchBuffer>(new AlignedBuffer(p, bytes));
  }
  ~AlignedBuffer() override { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  AlignedBuffer(std::byte* data, size_t size) : data_(data), size_(size) {}
  std::byte* data_;
  size_t size_;
};

}  // namespace

Status InprocWorld::Barrier() { return korovod::Barrier(comm_); }

Status InprocWorld::MaxDoubles(double* v, size_t n) {
  AllreduceOptions o;
  o.input = v;
  o.output = v;
  o.count = n;
  o.type = DataType::kFloat64;
  o.op = ReduceOp::kMax;
  return korovod::Allreduce(comm_, o);
}

StatusOr<std::unique_ptr<BenchBuffer>> InprocWorld::Allocate(size_t bytes) {
  return AlignedBuffer::Allocate(bytes);
}

Status InprocWorld::Allreduce(BenchBuffer& buf, size_t count, DataType type,
                              AllreduceAlgorithm algo) {
  AllreduceOptions o;
  o.input = buf.data();
  o.output = buf.data();
  o.count = count;
  o.type = type;
  o.op = ReduceOp::kSum;
  o.algorithm = algo;
  return korovod::Allreduce(comm_, o);
}

Status InprocWorld::Broadcast(BenchBuffer& buf, size_t count, DataType type, int root) {
  BroadcastOptions o;
  o.buffer = buf.data();
  o.count = count;
  o.type = type;
  o.root = root;
  return korovod::Broadcast(comm_, o);
}

StatusOr<std::span<const std::byte>> InprocWorld::Allgather(BenchBuffer& in, BenchBuffer* out,
                                                            size_t block, DataType type) {
  counts_.assign(comm_.size(), block);
  AllgatherOptions o;
  o.input = in.data();
  o.output = out->data();
  o.counts = counts_;
  o.type = type;
  KV_RETURN_IF_ERROR(korovod::Allgather(comm_, o));
  return std::span<const std::byte>(out->data(), block * comm_.size() * DataTypeSize(type));
}

StatusOr<std::span<const std::byte>> InprocWorld::Alltoall(BenchBuffer& in, BenchBuffer* out,
                                                           size_t block, DataType type) {
  counts_.assign(comm_.size(), block);
  AlltoallOptions o;
  o.input = in.data();
  o.output = out->data();
  o.send_counts = counts_;
  o.recv_counts = counts_;
  o.type = type;
  KV_RETURN_IF_ERROR(korovod::Alltoall(comm_, o));
  return std::span<const std::byte>(out->data(), block * comm_.size() * DataTypeSize(type));
}

StatusOr<std::span<const std::byte>> InprocWorld::ReduceScatter(BenchBuffer& in, BenchBuffer* out,
                                                                size_t block, DataType type) {
  counts_.assign(comm_.size(), block);
  ReduceScatterOptions o;
  o.input = in.data();
  o.output = out->data();
  o.recv_counts = counts_;
  o.type = type;
  o.op = ReduceOp::kSum;
  KV_RETURN_IF_ERROR(korovod::ReduceScatter(comm_, o));
  return std::span<const std::byte>(out->data(), block * DataTypeSize(type));
}

}  // namespace korovod::bench
