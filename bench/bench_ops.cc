#include "bench/bench_ops.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace korovod::bench {

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
    case DataType::kInt16:
      return static_cast<uint16_t>(static_cast<int16_t>(v));
    case DataType::kUint16:
      return static_cast<uint16_t>(v);
    case DataType::kBool:
      return v != 0 ? 1 : 0;
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
    case DataType::kInt16:
      return Load<int16_t>(p);
    case DataType::kUint16:
      return Load<uint16_t>(p);
    case DataType::kBool:
      return Load<uint8_t>(p);
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
  OpBase(BenchWorld& world, DataType type)
      : world_(world),
        type_(type),
        elem_(DataTypeSize(type)),
        n_(world.size()),
        rank_(world.rank()) {}

 protected:
  // Elements per rank block for ops whose buffer is N blocks (allgather output, alltoall,
  // reducescatter input): nccl-tests rounds the count down to a multiple of N; we keep at least
  // one element per rank so the smallest sizes still exercise every pair.
  size_t BlockElems(size_t bytes) const { return std::max<size_t>(1, bytes / elem_ / n_); }

  void Fill(std::byte* base, size_t first, size_t count, double v) const {
    std::byte* p = base + first * elem_;
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
  void CheckRange(const std::byte* base, size_t first, size_t count, double v,
                  CheckResult* r) const {
    const std::byte* p = base + first * elem_;
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

  // Overwrites element `index` with expected+1, like the peers' fault injection. The output may
  // be read-only to us (a sidecar's result heap), so the corruption goes into a private copy.
  std::span<const std::byte> Corrupt(std::span<const std::byte> out, size_t index,
                                     double expected) {
    corrupted_.assign(out.begin(), out.end());
    const uint64_t bits = Encode(type_, expected + 1);
    std::memcpy(corrupted_.data() + index * elem_, &bits, elem_);  // little-endian: low bytes
    return corrupted_;
  }

  BenchWorld& world_;
  const DataType type_;
  const size_t elem_;
  const int n_;
  const int rank_;

 private:
  std::vector<std::byte> corrupted_;
};

// In place, like the peers (MPI_IN_PLACE, gloo, torch): the output overwrites the input.
class AllreduceOp final : public OpBase {
 public:
  AllreduceOp(BenchWorld& world, DataType type, AllreduceAlgorithm algo)
      : OpBase(world, type), algo_(algo) {}
  const char* name() const override { return "allreduce"; }
  bool inplace() const override { return true; }
  double BusFactor(int n) const override { return 2.0 * (n - 1) / n; }
  size_t RoundBytes(size_t requested) const override { return requested; }
  Status Prepare(size_t bytes) override {
    count_ = bytes / elem_;
    KV_ASSIGN_OR_RETURN(buf_, world_.Allocate(bytes));
    return OkStatus();
  }
  void FillForVerify() override { Fill(buf_->data(), 0, count_, rank_ + 1); }
  Status Run() override { return world_.Allreduce(*buf_, count_, type_, algo_); }
  CheckResult Check(bool inject_fault) override {
    const double expect = n_ * (n_ + 1) / 2.0;
    std::span<const std::byte> out(buf_->data(), count_ * elem_);
    if (inject_fault) out = Corrupt(out, count_ - 1, expect);
    CheckResult r;
    CheckRange(out.data(), 0, count_, expect, &r);
    return r;
  }
  void Release() override { buf_.reset(); }

 private:
  const AllreduceAlgorithm algo_;
  size_t count_ = 0;
  std::unique_ptr<BenchBuffer> buf_;
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
    KV_ASSIGN_OR_RETURN(buf_, world_.Allocate(bytes));
    return OkStatus();
  }
  // Non-roots start from their own rank+1, which differs from the root's 1, so a broadcast that
  // leaves a rank's buffer alone fails the check.
  void FillForVerify() override { Fill(buf_->data(), 0, count_, rank_ + 1); }
  Status Run() override { return world_.Broadcast(*buf_, count_, type_, kRoot); }
  CheckResult Check(bool inject_fault) override {
    std::span<const std::byte> out(buf_->data(), count_ * elem_);
    if (inject_fault) out = Corrupt(out, count_ - 1, kRoot + 1);
    CheckResult r;
    CheckRange(out.data(), 0, count_, kRoot + 1, &r);
    return r;
  }
  void Release() override { buf_.reset(); }

 private:
  static constexpr int kRoot = 0;
  size_t count_ = 0;
  std::unique_ptr<BenchBuffer> buf_;
};

// The three out-of-place ops: an input of in_blocks and an output of out_blocks rank blocks. The
// output is zeroed before each verification op where the op writes into our buffer; a world
// that places each output itself hands a fresh block to every op.
class OutOfPlaceOp : public OpBase {
 public:
  OutOfPlaceOp(BenchWorld& world, DataType type, int in_blocks, int out_blocks)
      : OpBase(world, type), in_blocks_(in_blocks), out_blocks_(out_blocks) {}
  bool inplace() const override { return false; }
  double BusFactor(int n) const override { return (n - 1.0) / n; }
  size_t RoundBytes(size_t requested) const override { return BlockElems(requested) * n_ * elem_; }
  Status Prepare(size_t bytes) override {
    block_ = BlockElems(bytes);
    KV_ASSIGN_OR_RETURN(in_, world_.Allocate(block_ * in_blocks_ * elem_));
    KV_ASSIGN_OR_RETURN(out_, world_.AllocateOutput(block_ * out_blocks_ * elem_));
    return OkStatus();
  }
  void FillForVerify() override {
    FillInput(in_->data());
    if (out_) Fill(out_->data(), 0, block_ * out_blocks_, 0);
  }
  Status Run() override {
    KV_ASSIGN_OR_RETURN(result_, RunOp(*in_, out_.get()));
    return OkStatus();
  }
  CheckResult Check(bool inject_fault) override {
    CheckResult r;
    if (result_.size() != block_ * out_blocks_ * elem_) {
      r.bad = r.checked = 1;  // an output of the wrong size is wrong everywhere
      r.got = static_cast<double>(result_.size());
      r.expected = static_cast<double>(block_ * out_blocks_ * elem_);
      return r;
    }
    std::span<const std::byte> out = result_;
    if (inject_fault) out = Corrupt(out, block_ * out_blocks_ - 1, Expected(out_blocks_ - 1));
    for (int j = 0; j < out_blocks_; ++j)
      CheckRange(out.data(), j * block_, block_, Expected(j), &r);
    return r;
  }
  void Release() override {
    result_ = {};
    in_.reset();
    out_.reset();
  }

 protected:
  virtual void FillInput(std::byte* in) const = 0;
  virtual StatusOr<std::span<const std::byte>> RunOp(BenchBuffer& in, BenchBuffer* out) = 0;
  // The value every element of output block j must hold on this rank.
  virtual double Expected(int j) const = 0;

  size_t block_ = 0;

 private:
  const int in_blocks_;
  const int out_blocks_;
  std::unique_ptr<BenchBuffer> in_, out_;
  std::span<const std::byte> result_;
};

// bytes = the output (N blocks), as nccl-tests' all_gather_perf reports it.
class AllgatherOp final : public OutOfPlaceOp {
 public:
  AllgatherOp(BenchWorld& world, DataType type) : OutOfPlaceOp(world, type, 1, world.size()) {}
  const char* name() const override { return "allgather"; }

 private:
  void FillInput(std::byte* in) const override { Fill(in, 0, block_, rank_ + 1); }
  StatusOr<std::span<const std::byte>> RunOp(BenchBuffer& in, BenchBuffer* out) override {
    return world_.Allgather(in, out, block_, type_);
  }
  double Expected(int j) const override { return j + 1; }
};

// bytes = one rank's send buffer (N blocks), as nccl-tests' alltoall_perf. Rank r sends block d
// filled with (r+1) + N*d, so rank `me` must find (j+1) + N*me in the block from j: the value
// names both the sender and the block it picked, catching a misrouted block as well as a lost one.
class AlltoallOp final : public OutOfPlaceOp {
 public:
  AlltoallOp(BenchWorld& world, DataType type)
      : OutOfPlaceOp(world, type, world.size(), world.size()) {}
  const char* name() const override { return "alltoall"; }

 private:
  void FillInput(std::byte* in) const override {
    for (int d = 0; d < n_; ++d) Fill(in, d * block_, block_, (rank_ + 1) + n_ * d);
  }
  StatusOr<std::span<const std::byte>> RunOp(BenchBuffer& in, BenchBuffer* out) override {
    return world_.Alltoall(in, out, block_, type_);
  }
  double Expected(int j) const override { return (j + 1) + n_ * rank_; }
};

// bytes = the input (N blocks), as nccl-tests' reduce_scatter_perf. Rank r fills block d with
// (r+1) + d, so rank `me` must hold N(N+1)/2 + N*me: a block reduced into the wrong rank shows.
class ReduceScatterOp final : public OutOfPlaceOp {
 public:
  ReduceScatterOp(BenchWorld& world, DataType type) : OutOfPlaceOp(world, type, world.size(), 1) {}
  const char* name() const override { return "reducescatter"; }

 private:
  void FillInput(std::byte* in) const override {
    for (int d = 0; d < n_; ++d) Fill(in, d * block_, block_, (rank_ + 1) + d);
  }
  StatusOr<std::span<const std::byte>> RunOp(BenchBuffer& in, BenchBuffer* out) override {
    return world_.ReduceScatter(in, out, block_, type_);
  }
  double Expected(int) const override {
    return n_ * (n_ + 1) / 2.0 + static_cast<double>(n_) * rank_;
  }
};

}  // namespace

std::unique_ptr<BenchOp> MakeBenchOp(BenchOpKind kind, BenchWorld& world, DataType type,
                                     AllreduceAlgorithm algo) {
  switch (kind) {
    case BenchOpKind::kAllreduce:
      return std::make_unique<AllreduceOp>(world, type, algo);
    case BenchOpKind::kAllgather:
      return std::make_unique<AllgatherOp>(world, type);
    case BenchOpKind::kBroadcast:
      return std::make_unique<BroadcastOp>(world, type);
    case BenchOpKind::kAlltoall:
      return std::make_unique<AlltoallOp>(world, type);
    case BenchOpKind::kReduceScatter:
      return std::make_unique<ReduceScatterOp>(world, type);
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
