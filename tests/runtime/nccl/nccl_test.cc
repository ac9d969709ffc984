// Tests of the NCCL backend (runtime/nccl).
//
// Ranks are threads with a CPU communicator each over loopback (tests/runtime/rank_harness.h);
// rank r drives CUDA device r. NCCL does not support two ranks on one device, so the world has
// min(2, devices) ranks: with one GPU every collective runs on a single rank, with two or more
// the uneven and grouped paths run across ranks too. Where there is no CUDA device every test
// that needs one is skipped; CreateFailsCleanly runs everywhere, since failing cleanly without a
// GPU is exactly what it checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/nccl/nccl_communicator.h"
#include "runtime/world/communicator.h"
#include "tests/runtime/rank_harness.h"
#include "tests/runtime/test_data.h"

namespace korovod {
namespace {

using testing::Buffer;
using testing::RankContext;

#define KV_SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                      \
    if (CudaDeviceCount() == 0) {                                                           \
      GTEST_SKIP() << "no CUDA device: the NCCL backend needs a GPU and its driver to run"; \
    }                                                                                       \
  } while (0)

constexpr uint64_t kSeed = 0x6e63636c;

int WorldSize() { return std::min(2, CudaDeviceCount()); }

// Device memory for one buffer; null for zero bytes, like an empty tensor.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }
  bool Upload(const void* host) {
    return bytes_ == 0 || cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  bool Download(void* host) const {
    return bytes_ == 0 || cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost) == cudaSuccess;
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

class Stream {
 public:
  Stream() {
    if (cudaStreamCreate(&stream_) != cudaSuccess) stream_ = nullptr;
  }
  ~Stream() {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

using NcclBody = std::function<Status(RankContext&, NcclCommunicator&, cudaStream_t)>;

// Runs `body` on WorldSize() ranks, each with its NCCL communicator on device == rank and its
// own stream; fails the test for every rank whose setup, body or recorded checks failed.
void RunNccl(const NcclBody& body) {
  testing::WorldSpec spec;
  spec.size = WorldSize();
  spec.transport = TransportKind::kTcp;
  spec.connect_timeout = std::chrono::seconds(30);
  spec.op_timeout = std::chrono::seconds(60);
  const testing::ThreadWorld world = testing::RunThreadRanks(spec, [&](RankContext& ctx) {
    if (cudaSetDevice(ctx.rank()) != cudaSuccess) return Internal("cudaSetDevice failed");
    Stream stream;
    if (stream.get() == nullptr) return Internal("cudaStreamCreate failed");
    auto nccl = NcclCommunicator::Create(ctx.comm(), ctx.rank());
    if (!nccl.ok()) return nccl.status();
    return body(ctx, **nccl, stream.get());
  });
  testing::ExpectAllRanksOk(world);
}

std::string Label(const char* what, DataType t, ReduceOp op) {
  return std::string(what) + " " + DataTypeName(t) + " " + ReduceOpName(op);
}

// Allreduce of `count` elements with test_data's exact inputs, checked against its reference.
Status CheckAllreduce(RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream, DataType t,
                      ReduceOp op, size_t count, double prescale, double postscale, bool in_place) {
  const size_t bytes = count * DataTypeSize(t);
  Buffer host(bytes);
  testing::FillReduceInput(host.data(), count, t, kSeed, op, ctx.rank(), ctx.size());
  DeviceBuffer in(bytes);
  DeviceBuffer out(bytes);
  if (!in.ok() || !out.ok() || !in.Upload(host.data())) return Internal("device buffer setup");
  AllreduceOptions o;
  o.input = in.get();
  o.output = in_place ? in.get() : out.get();
  o.count = count;
  o.type = t;
  o.op = op;
  o.prescale = prescale;
  o.postscale = postscale;
  KV_RETURN_IF_ERROR(nccl.Allreduce(o, stream));
  if (!(in_place ? in : out).Download(host.data())) return Internal("download");
  testing::ReduceSpec spec;
  spec.seed = kSeed;
  spec.op = op;
  spec.type = t;
  spec.size = ctx.size();
  spec.prescale = prescale;
  spec.postscale = postscale;
  const std::string diff = testing::CheckReduction(spec, host.data(), count);
  ctx.Check(diff.empty(), Label("allreduce", t, op) + ": " + diff);
  return OkStatus();
}

TEST(NcclTest, CreateFailsCleanly) {
  // Rank 0 asks for a device that does not exist; every rank must fail at once (no timeout),
  // and rank 1's error must name rank 0. Needs no GPU: without one both ranks fail locally.
  testing::WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  const int devices = CudaDeviceCount();
  EXPECT_GE(devices, 0);
  std::vector<Status> results(2);
  const testing::ThreadWorld world = testing::RunThreadRanks(spec, [&](RankContext& ctx) {
    const int device = ctx.rank() == 0 ? devices + 5 : 0;
    auto nccl = NcclCommunicator::Create(ctx.comm(), device);
    results[ctx.rank()] = nccl.status();
    return OkStatus();
  });
  testing::ExpectAllRanksOk(world);
  for (int r = 0; r < 2; ++r) {
    const Status& s = results[r];
    EXPECT_FALSE(s.ok()) << "rank " << r;
    EXPECT_NE(s.message().find("rank " + std::to_string(r)), std::string::npos) << s.ToString();
    EXPECT_LT(world.reports[r].elapsed, std::chrono::seconds(10)) << "rank " << r;
  }
  EXPECT_EQ(results[0].code(), StatusCode::kFailedPrecondition) << results[0].ToString();
  if (devices == 0) {
    EXPECT_NE(results[0].message().find("no CUDA device"), std::string::npos);
    EXPECT_EQ(results[1].code(), StatusCode::kFailedPrecondition) << results[1].ToString();
  } else {
    EXPECT_NE(results[0].message().find("out of range"), std::string::npos);
    EXPECT_EQ(results[1].code(), StatusCode::kAborted) << results[1].ToString();
    EXPECT_NE(results[1].message().find("rank 0 cannot join"), std::string::npos)
        << results[1].ToString();
  }
}

TEST(NcclTest, AllreduceEveryOpAndType) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    for (DataType t : kAllDataTypes) {
      // NCCL has no 16-bit integer type: the backend refuses those (Unimplemented, naming it).
      if (t == DataType::kInt16 || t == DataType::kUint16) continue;
      for (ReduceOp op : kAllReduceOps) {
        KV_RETURN_IF_ERROR(CheckAllreduce(ctx, nccl, stream, t, op, 1027, 1.0, 1.0, false));
      }
    }
    // In place, and a size that is not a multiple of anything NCCL chunks by.
    KV_RETURN_IF_ERROR(CheckAllreduce(ctx, nccl, stream, DataType::kFloat32, ReduceOp::kSum,
                                      (1 << 20) + 3, 1.0, 1.0, true));
    return OkStatus();
  });
}

TEST(NcclTest, AllreduceScalesFloatSumAndAverage) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    // 0.5 and 3 keep every product exact in every float type, so only the reference's
    // tolerance for scaling applies.
    for (DataType t :
         {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        KV_RETURN_IF_ERROR(CheckAllreduce(ctx, nccl, stream, t, op, 999, 0.5, 3.0, false));
      }
    }
    return OkStatus();
  });
}

TEST(NcclTest, UnsupportedScalingIsRefusedWithoutBreaking) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    DeviceBuffer buf(64 * sizeof(float));
    AllreduceOptions o;
    o.input = buf.get();
    o.output = buf.get();
    o.count = 64;
    o.op = ReduceOp::kMax;
    o.prescale = 2.0;
    Status s = nccl.Allreduce(o, stream);
    ctx.Check(s.code() == StatusCode::kUnimplemented, "max with prescale: " + s.ToString());
    o.op = ReduceOp::kSum;
    o.type = DataType::kInt32;
    s = nccl.Allreduce(o, stream);
    ctx.Check(s.code() == StatusCode::kUnimplemented, "int32 sum with prescale: " + s.ToString());
    ctx.Check(nccl.broken().ok(), "refused call broke the communicator");
    return nccl.Barrier(stream);
  });
}

TEST(NcclTest, AllgatherEvenAndUneven) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    const int n = ctx.size();
    const std::vector<std::vector<size_t>> cases = {
        std::vector<size_t>(n, 256),                                  // ncclAllGather
        n == 1 ? std::vector<size_t>{7} : std::vector<size_t>{3, 5},  // grouped broadcasts
        n == 1 ? std::vector<size_t>{0} : std::vector<size_t>{0, 9},  // a rank with nothing
    };
    for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
      for (const std::vector<size_t>& counts : cases) {
        size_t total = 0;
        for (size_t c : counts) total += c;
        const size_t esz = DataTypeSize(t);
        const size_t mine = counts[ctx.rank()];
        Buffer host_in(mine * esz);
        testing::FillMoveValues(host_in.data(), mine, t, kSeed, ctx.rank(), 0);
        DeviceBuffer in(mine * esz);
        DeviceBuffer out(total * esz);
        if (!in.ok() || !out.ok() || !in.Upload(host_in.data())) return Internal("setup");
        AllgatherOptions o;
        o.input = in.get();
        o.output = out.get();
        o.counts = counts;
        o.type = t;
        KV_RETURN_IF_ERROR(nccl.Allgather(o, stream));
        Buffer host_out(total * esz);
        if (!out.Download(host_out.data())) return Internal("download");
        size_t off = 0;
        for (int r = 0; r < n; ++r) {
          const std::string diff =
              testing::CheckMoveValues(host_out.data() + off * esz, counts[r], t, kSeed, r, 0);
          ctx.Check(diff.empty(), std::string("allgather ") + DataTypeName(t) + " block of rank " +
                                      std::to_string(r) + ": " + diff);
          off += counts[r];
        }
      }
    }
    return OkStatus();
  });
}

TEST(NcclTest, BroadcastFromRankOne) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    const int root = std::min(1, ctx.size() - 1);
    const size_t count = 4099;
    const DataType t = DataType::kFloat32;
    Buffer host(count * DataTypeSize(t));
    if (ctx.rank() == root) {
      testing::FillMoveValues(host.data(), count, t, kSeed, root, 0);
    } else {
      testing::FillGarbage(host.data(), host.bytes());
    }
    DeviceBuffer buf(host.bytes());
    if (!buf.ok() || !buf.Upload(host.data())) return Internal("setup");
    BroadcastOptions o;
    o.buffer = buf.get();
    o.count = count;
    o.type = t;
    o.root = root;
    KV_RETURN_IF_ERROR(nccl.Broadcast(o, stream));
    if (!buf.Download(host.data())) return Internal("download");
    const std::string diff = testing::CheckMoveValues(host.data(), count, t, kSeed, root, 0);
    ctx.Check(diff.empty(), "broadcast from rank " + std::to_string(root) + ": " + diff);
    return OkStatus();
  });
}

TEST(NcclTest, AlltoallUneven) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    const int n = ctx.size();
    const int me = ctx.rank();
    const DataType t = DataType::kFloat32;
    const size_t esz = DataTypeSize(t);
    for (bool uneven : {false, true}) {
      std::vector<size_t> send(n), recv(n);
      for (int j = 0; j < n; ++j) {
        send[j] = testing::AlltoallCount(1000, n, me, j, uneven);
        recv[j] = testing::AlltoallCount(1000, n, j, me, uneven);
      }
      size_t send_total = 0, recv_total = 0;
      for (int j = 0; j < n; ++j) {
        send_total += send[j];
        recv_total += recv[j];
      }
      Buffer host_in(send_total * esz);
      size_t off = 0;
      for (int j = 0; j < n; ++j) {
        testing::FillMoveValues(host_in.data() + off * esz, send[j], t, kSeed, me, j);
        off += send[j];
      }
      DeviceBuffer in(send_total * esz);
      DeviceBuffer out(recv_total * esz);
      if (!in.ok() || !out.ok() || !in.Upload(host_in.data())) return Internal("setup");
      AlltoallOptions o;
      o.input = in.get();
      o.output = out.get();
      o.send_counts = send;
      o.recv_counts = recv;
      o.type = t;
      KV_RETURN_IF_ERROR(nccl.Alltoall(o, stream));
      Buffer host_out(recv_total * esz);
      if (!out.Download(host_out.data())) return Internal("download");
      off = 0;
      for (int j = 0; j < n; ++j) {
        const std::string diff =
            testing::CheckMoveValues(host_out.data() + off * esz, recv[j], t, kSeed, j, me);
        ctx.Check(diff.empty(), std::string("alltoall ") + (uneven ? "uneven" : "even") +
                                    " block from rank " + std::to_string(j) + ": " + diff);
        off += recv[j];
      }
    }
    return OkStatus();
  });
}

TEST(NcclTest, ReduceScatterEvenAndUneven) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext& ctx, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    const int n = ctx.size();
    for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax}) {
        for (bool uneven : {false, true}) {
          const size_t total = 3001;
          // Uneven across 2 ranks is {3001, 0}; on one rank both cases are one block.
          std::vector<size_t> counts = testing::SplitCounts(total, n, uneven);
          if (!uneven && n > 1) counts.assign(n, 1024);  // equal: ncclReduceScatter
          size_t sum = 0;
          for (size_t c : counts) sum += c;
          const size_t esz = DataTypeSize(t);
          Buffer host_in(sum * esz);
          testing::FillReduceInput(host_in.data(), sum, t, kSeed, op, ctx.rank(), n);
          DeviceBuffer in(sum * esz);
          DeviceBuffer out(counts[ctx.rank()] * esz);
          if (!in.ok() || !out.ok() || !in.Upload(host_in.data())) return Internal("setup");
          ReduceScatterOptions o;
          o.input = in.get();
          o.output = out.get();
          o.recv_counts = counts;
          o.type = t;
          o.op = op;
          KV_RETURN_IF_ERROR(nccl.ReduceScatter(o, stream));
          Buffer host_out(counts[ctx.rank()] * esz);
          if (!out.Download(host_out.data())) return Internal("download");
          size_t first = 0;
          for (int r = 0; r < ctx.rank(); ++r) first += counts[r];
          testing::ReduceSpec spec;
          spec.seed = kSeed;
          spec.op = op;
          spec.type = t;
          spec.size = n;
          const std::string diff =
              testing::CheckReduction(spec, host_out.data(), counts[ctx.rank()], first);
          ctx.Check(diff.empty(),
                    Label(uneven ? "reducescatter uneven" : "reducescatter", t, op) + ": " + diff);
        }
      }
    }
    return OkStatus();
  });
}

TEST(NcclTest, Barrier) {
  KV_SKIP_WITHOUT_GPU();
  RunNccl([](RankContext&, NcclCommunicator& nccl, cudaStream_t stream) -> Status {
    for (int i = 0; i < 3; ++i) KV_RETURN_IF_ERROR(nccl.Barrier(stream));
    return OkStatus();
  });
}

}  // namespace
}  // namespace korovod
