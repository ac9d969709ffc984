#include "bench/bench_ops.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace korovod::bench {

StatusOr<AlignedBuffer> AlignedBuffer::Allocate(size_t bytes) {
  // Page alignment like the peers' posix_memalign(4096): vector loads and the shm copies then
  // never straddle a page because of where the buffer happened to start.
  constexpr size_t kAlign = 4096;
  const size_t rounded = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  AlignedBuffer b;
  b.data_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded)));
  if (!b.data_) {
    return Internal("cannot allocate " + std::to_string(bytes) + " bytes for a benchmark buffer");
  }
  std::memset(b.data_.get(), 0, rounded);
  b.size_ = bytes;
  return b;
}

namespace {

// Bit pattern of the (small, non-negative, integral) value v in type t.
uint64_t Encode(DataType t, double v) {
  switch (t) {
    case DataType::kUint8:
      return static_cast<uint8_t>(v);
    case DataType::kInt8:
      return static_cast<uint8_t>(static_cast<int8_t>(v));
    case DataType::kInt32:
      return static_cast<uint32_t>(static_cast<int32_t>(v));
    case DataType::kInt64:
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    case DataType::kFloat16:
      return FloatToHalf(static_cast<float>(v));
    case DataType::kBFloat16:
      return FloatToBFloat16(static_cast<float>(v));
    case DataType::kFloat32:
      return std::bit_cast<uint32_t>(static_cast<float>(v));
    case DataType::kFloat64:
      return std::bit_cast<uint64_t>(v);
  }
  return 0;
}

template <typename U>
U Load(const std::byte* p) {
  U u;
  std::memcpy(&u, p, sizeof u);  // the runtime wrote a float/int object; memcpy avoids aliasing
  return u;
}

double Decode(DataType t, const std::byte* p) {
  switch (t) {
    case DataType::kUint8:
      return Load<uint8_t>(p);
    case DataType::kInt8:
      return Load<int8_t>(p);
    case DataType::kInt32:
      return Load<int32_t>(p);
    case DataType::kInt64:
      return static_cast<double>(Load<int64_t>(p));
    case DataType::kFloat16:
      return HalfToFloat(Load<uint16_t>(p));
    case DataType::kBFloat16:
      return BFloat16ToFloat(Load<uint16_t>(p));
    case DataType::kFloat32:
      return Load<float>(p);
    case DataType::kFloat64:
      return Load<double>(p);
  }
  return 0;
}

template <typename U>
void FillBits(std::byte* p, size_t count, U bits) {
  for (size_t i = 0; i < count; ++i) std::memcpy(p + i * sizeof(U), &bits, sizeof(U));
}

// Bitwise comparison: every expected value is an exactly representable integer, so bits equal
// iff values equal (no -0/NaN can be expected).
template <typename U>
size_t CountBad(const std::byte* p, size_t count, U bits, size_t* first_bad) {
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    if (Load<U>(p + i * sizeof(U)) != bits) {
      if (bad == 0) *first_bad = i;
      ++bad;
    }
  }
  return bad;
}

class OpBase : public BenchOp {
 public:
  // Public so the derived ops can inherit it (inherited constructors keep the base's access);
  // OpBase itself is abstract.
  OpBase(Communicator& comm, DataType type)
      : comm_(comm), type_(type), elem_(DataTypeSize(type)), n_(comm.size()), rank_(comm.rank()) {}

 protected:
  // Elements per rank block for ops whose buffer is N blocks (allgather output, alltoall,
  // reducescatter input): nccl-tests rounds the count down to a multiple of N; we keep at least
  // one element per rank so the smallest sizes still exercise every pair.
  size_t BlockElems(size_t bytes) const { return std::max<size_t>(1, bytes / elem_ / n_); }

  void Fill(AlignedBuffer& b, size_t first, size_t count, double v) const {
    std::byte* p = b.data() + first * elem_;
    const uint64_t bits = Encode(type_, v);
    switch (elem_) {
      case 1:
        FillBits<uint8_t>(p, count, static_cast<uint8_t>(bits));
        break;
      case 2:
        FillBits<uint16_t>(p, count, static_cast<uint16_t>(bits));
        break;
      case 4:
        FillBits<uint32_t>(p, count, static_cast<uint32_t>(bits));
        break;
      default:
        FillBits<uint64_t>(p, count, bits);
        break;
    }
  }

  // Adds the mismatches of elements [first, first+count) against v to *r.
  void CheckRange(const AlignedBuffer& b, size_t first, size_t count, double v,
                  CheckResult* r) const {
    const std::byte* p = b.data() + first * elem_;
    const uint64_t bits = Encode(type_, v);
    size_t first_bad = 0, bad = 0;
    switch (elem_) {
      case 1:
        bad = CountBad<uint8_t>(p, count, static_cast<uint8_t>(bits), &first_bad);
        break;
      case 2:
        bad = CountBad<uint16_t>(p, count, static_cast<uint16_t>(bits), &first_bad);
        break;
      case 4:
        bad = CountBad<uint32_t>(p, count, static_cast<uint32_t>(bits), &first_bad);
        break;
      default:
        bad = CountBad<uint64_t>(p, count, bits, &first_bad);
        break;
    }
    if (bad != 0 && r->bad == 0) {
      r->first_bad = first + first_bad;
      r->got = Decode(type_, p + first_bad * elem_);
      r->expected = v;
    }
    r->bad += bad;
    r->checked += count;
  }

  // Overwrites element `index` with expected+1, like the peers' fault injection.
  void Corrupt(AlignedBuffer& b, size_t index, double expected) const {
    const uint64_t bits = Encode(type_, expected + 1);
    std::memcpy(b.data() + index * elem_, &bits, elem_);  // little-endian: low bytes first
  }

  StatusOr<AlignedBuffer> Alloc(size_t bytes) const { return AlignedBuffer::Allocate(bytes); }

  Communicator& comm_;
  const DataType type_;
  const size_t elem_;
  const int n_;
  const int rank_;
};

// In place, like the peers (MPI_IN_PLACE, gloo, torch): the output overwrites the input.
class AllreduceOp final : public OpBase {
 public:
  AllreduceOp(Communicator& comm, DataType type, AllreduceAlgorithm algo)
      : OpBase(comm, type), algo_(algo) {}
  const char* name() const override { return "allreduce"; }
  bool inplace() const override { return true; }
  double BusFactor(int n) const override { return 2.0 * (n - 1) / n; }
  size_t RoundBytes(size_t requested) const override { return requested; }
  Status Prepare(size_t bytes) override {
    count_ = bytes / elem_;
    KV_ASSIGN_OR_RETURN(buf_, Alloc(bytes));
    return OkStatus();
  }
  void FillForVerify() override { Fill(buf_, 0, count_, rank_ + 1); }
  Status Run() override {
    AllreduceOptions o;
    o.input = buf_.data();
    o.output = buf_.data();
    o.count = count_;
    o.type = type_;
    o.op = ReduceOp::kSum;
    o.algorithm = algo_;
    return Allreduce(comm_, o);
  }
  CheckResult Check(bool inject_fault) override {
    const double expect = n_ * (n_ + 1) / 2.0;
    if (inject_fault) Corrupt(buf_, count_ - 1, expect);
    CheckResult r;
    CheckRange(buf_, 0, count_, expect, &r);
    return r;
  }
  void Release() override { buf_ = AlignedBuffer(); }

 private:
  const AllreduceAlgorithm algo_;
  size_t count_ = 0;
  AlignedBuffer buf_;
};

// bytes = the output (N blocks), as nccl-tests' all_gather_perf reports it.
class AllgatherOp final : public OpBase {
 public:
  using OpBase::OpBase;
  const char* name() const override { return "allgather"; }
  bool inplace() const override { return false; }
  double BusFactor(int n) const override { return (n - 1.0) / n; }
  size_t RoundBytes(size_t requested) const override { return BlockElems(requested) * n_ * elem_; }
  Status Prepare(size_t bytes) override {
    block_ = BlockElems(bytes);
    counts_.assign(n_, block_);
    KV_ASSIGN_OR_RETURN(in_, Alloc(block_ * elem_));
    KV_ASSIGN_OR_RETURN(out_, Alloc(block_ * n_ * elem_));
    return OkStatus();
  }
  void FillForVerify() override {
    Fill(in_, 0, block_, rank_ + 1);
    Fill(out_, 0, block_ * n_, 0);
  }
  Status Run() override {
    AllgatherOptions o;
    o.input = in_.data();
    o.output = out_.data();
    o.counts = counts_;
    o.type = type_;
    return Allgather(comm_, o);
  }
  CheckResult Check(bool inject_fault) override {
    if (inject_fault) Corrupt(out_, block_ * n_ - 1, n_);
    CheckResult r;
    for (int j = 0; j < n_; ++j) CheckRange(out_, j * block_, block_, j + 1, &r);
    return r;
  }
  void Release() override {
    in_ = AlignedBuffer();
    out_ = AlignedBuffer();
  }

 private:
  size_t block_ = 0;
  std::vector<size_t> counts_;
  AlignedBuffer in_, out_;
};

// Root 0; the buffer is the input on the root and the output elsewhere (in place by nature).
class BroadcastOp final : public OpBase {
 public:
  using OpBase::OpBase;
  const char* name() const override { return "broadcast"; }
  bool inplace() const override { return true; }
  double BusFactor(int) const override { return 1.0; }
  size_t RoundBytes(size_t requested) const override { return requested; }
  Status Prepare(size_t bytes) override {
    count_ = bytes / elem_;
    KV_ASSIGN_OR_RETURN(buf_, Alloc(bytes));
    return OkStatus();
  }
  // Non-roots start from their own rank+1, which differs from the root's 1, so a broadcast that
  // leaves a rank's buffer alone fails the check.
  void FillForVerify() override { Fill(buf_, 0, count_, rank_ + 1); }
  Status Run() override {
    BroadcastOptions o;
    o.buffer = buf_.data();
    o.count = count_;
    o.type = type_;
    o.root = kRoot;
    return Broadcast(comm_, o);
  }
  CheckResult Check(bool inject_fault) override {
    if (inject_fault) Corrupt(buf_, count_ - 1, kRoot + 1);
    CheckResult r;
    CheckRange(buf_, 0, count_, kRoot + 1, &r);
    return r;
  }
  void Release() override { buf_ = AlignedBuffer(); }

 private:
  static constexpr int kRoot = 0;
  size_t count_ = 0;
  AlignedBuffer buf_;
};

// bytes = one rank's send buffer (N blocks), as nccl-tests' alltoall_perf. Rank r sends block d
// filled with (r+1) + N*d, so rank `me` must find (j+1) + N*me in the block from j: the value
// names both the sender and the block it picked, catching a misrouted block as well as a lost one.
class AlltoallOp final : public OpBase {
 public:
  using OpBase::OpBase;
  const char* name() const override { return "alltoall"; }
  bool inplace() const override { return false; }
  double BusFactor(int n) const override { return (n - 1.0) / n; }
  size_t RoundBytes(size_t requested) const override { return BlockElems(requested) * n_ * elem_; }
  Status Prepare(size_t bytes) override {
    block_ = BlockElems(bytes);
    counts_.assign(n_, block_);
    KV_ASSIGN_OR_RETURN(in_, Alloc(block_ * n_ * elem_));
    KV_ASSIGN_OR_RETURN(out_, Alloc(block_ * n_ * elem_));
    return OkStatus();
  }
  void FillForVerify() override {
    for (int d = 0; d < n_; ++d) Fill(in_, d * block_, block_, (rank_ + 1) + n_ * d);
    Fill(out_, 0, block_ * n_, 0);
  }
  Status Run() override {
    AlltoallOptions o;
    o.input = in_.data();
    o.output = out_.data();
    o.send_counts = counts_;
    o.recv_counts = counts_;
    o.type = type_;
    return Alltoall(comm_, o);
  }
  CheckResult Check(bool inject_fault) override {
    if (inject_fault) Corrupt(out_, block_ * n_ - 1, n_ + n_ * rank_);
    CheckResult r;
    for (int j = 0; j < n_; ++j) CheckRange(out_, j * block_, block_, (j + 1) + n_ * rank_, &r);
    return r;
  }
  void Release() override {
    in_ = AlignedBuffer();
    out_ = AlignedBuffer();
  }

 private:
  size_t block_ = 0;
  std::vector<size_t> counts_;
  AlignedBuffer in_, out_;
};

// bytes = the input (N blocks), as nccl-tests' reduce_scatter_perf. Rank r fills block d with
// (r+1) + d, so rank `me` must hold N(N+1)/2 + N*me: a block reduced into the wrong rank shows.
class ReduceScatterOp final : public OpBase {
 public:
  using OpBase::OpBase;
  const char* name() const override { return "reducescatter"; }
  bool inplace() const override { return false; }
  double BusFactor(int n) const override { return (n - 1.0) / n; }
  size_t RoundBytes(size_t requested) const override { return BlockElems(requested) * n_ * elem_; }
  Status Prepare(size_t bytes) override {
    block_ = BlockElems(bytes);
    counts_.assign(n_, block_);
    KV_ASSIGN_OR_RETURN(in_, Alloc(block_ * n_ * elem_));
    KV_ASSIGN_OR_RETURN(out_, Alloc(block_ * elem_));
    return OkStatus();
  }
  void FillForVerify() override {
    for (int d = 0; d < n_; ++d) Fill(in_, d * block_, block_, (rank_ + 1) + d);
    Fill(out_, 0, block_, 0);
  }
  Status Run() override {
    ReduceScatterOptions o;
    o.input = in_.data();
    o.output = out_.data();
    o.recv_counts = counts_;
    o.type = type_;
    o.op = ReduceOp::kSum;
    return ReduceScatter(comm_, o);
  }
  CheckResult Check(bool inject_fault) override {
    const double expect = n_ * (n_ + 1) / 2.0 + static_cast<double>(n_) * rank_;
    if (inject_fault) Corrupt(out_, block_ - 1, expect);
    CheckResult r;
    CheckRange(out_, 0, block_, expect, &r);
    return r;
  }
  void Release() override {
    in_ = AlignedBuffer();
    out_ = AlignedBuffer();
  }

 private:
  size_t block_ = 0;
  std::vector<size_t> counts_;
  AlignedBuffer in_, out_;
};

}  // namespace

std::unique_ptr<BenchOp> MakeBenchOp(BenchOpKind kind, Communicator& comm, DataType type,
                                     AllreduceAlgorithm algo) {
  switch (kind) {
    case BenchOpKind::kAllreduce:
      return std::make_unique<AllreduceOp>(comm, type, algo);
    case BenchOpKind::kAllgather:
      return std::make_unique<AllgatherOp>(comm, type);
    case BenchOpKind::kBroadcast:
      return std::make_unique<BroadcastOp>(comm, type);
    case BenchOpKind::kAlltoall:
      return std::make_unique<AlltoallOp>(comm, type);
    case BenchOpKind::kReduceScatter:
      return std::make_unique<ReduceScatterOp>(comm, type);
  }
  return nullptr;
}

double MaxVerifyValue(BenchOpKind kind, int n) {
  const double sum = n * (n + 1) / 2.0;
  switch (kind) {
    case BenchOpKind::kAllreduce:
      return sum;
    case BenchOpKind::kAllgather:
    case BenchOpKind::kBroadcast:
      return n;
    case BenchOpKind::kAlltoall:
      return static_cast<double>(n) * n;
    case BenchOpKind::kReduceScatter:
      return sum + static_cast<double>(n) * (n - 1);
  }
  return sum;
}

}  // namespace korovod::bench
