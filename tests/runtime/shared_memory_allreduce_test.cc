// The one-host allreduce through shared memory: ranks reduce straight from each other's buffers
// when those lie in registered shared regions (the sidecars' arenas), and go through their
// windows in pieces otherwise. Every result is checked against the exact reference, and every
// rank must hold the same bits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/shared_memory.h"
#include "runtime/collectives/collectives.h"
#include "runtime/world/process_set.h"
#include "tests/runtime/rank_harness.h"
#include "tests/runtime/test_data.h"

namespace korovod::testing {
namespace {

constexpr size_t kRegionBytes = size_t{64} << 20;
constexpr int kMaxRanks = 4;

// One shm object per rank, registered as that rank's shared region before the world connects.
class Regions {
 public:
  explicit Regions(const std::string& tag) : tag_(tag) {}
  // WorldSpec::customize: creates and maps rank's region and registers it.
  void Register(WorldOptions& o) {
    const std::string name = "/korovod-test-region-" + std::to_string(::getpid()) + "-" + tag_ +
                             "-r" + std::to_string(o.rank);
    auto seg = ShmSegment::Create(name, kRegionBytes, 0600);
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    auto map = seg->Map(kRegionBytes);
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    o.shared_regions.push_back({name, map->data(), kRegionBytes});
    segments_[o.rank] = std::make_unique<ShmSegment>(std::move(seg).value());
    mappings_[o.rank] = std::make_unique<ShmMapping>(std::move(map).value());
  }
  std::byte* base(int rank) { return mappings_[rank]->data(); }

 private:
  std::string tag_;
  std::array<std::unique_ptr<ShmSegment>, kMaxRanks> segments_;
  std::array<std::unique_ptr<ShmMapping>, kMaxRanks> mappings_;
};

// The phases a rank's collectives went through (the timeline's view), to tell the paths apart:
// only the way through the windows copies in.
class PhaseLog : public PhaseObserver {
 public:
  explicit PhaseLog(Communicator& comm) : comm_(comm) { comm_.set_phase_observer(this); }
  ~PhaseLog() override { comm_.set_phase_observer(nullptr); }
  void PhaseBegin(const char* phase) override { seen_.insert(phase); }
  void PhaseEnd() override {}
  bool saw(const std::string& phase) const { return seen_.count(phase) > 0; }

 private:
  Communicator& comm_;
  std::set<std::string> seen_;
};

struct Buffers {
  std::byte* in;
  std::byte* out;
};

// Runs one allreduce with the inputs of test_data.h and checks the result on this rank.
Status RunAndCheck(RankContext& ctx, const std::string& key, Buffers b, size_t count, DataType t,
                   ReduceOp op, const ProcessSet* set = nullptr, double prescale = 1.0,
                   double postscale = 1.0) {
  const int set_rank = set != nullptr ? set->rank() : ctx.rank();
  const int set_size = set != nullptr ? set->size() : ctx.size();
  const uint64_t seed = Mix(std::hash<std::string>()(key));
  FillReduceInput(b.in, count, t, seed, op, set_rank, set_size);
  if (b.out != b.in) FillGarbage(b.out, count * DataTypeSize(t));
  AllreduceOptions o;
  o.input = b.in;
  o.output = b.out;
  o.count = count;
  o.type = t;
  o.op = op;
  o.set = set;
  o.prescale = prescale;
  o.postscale = postscale;
  o.algorithm = AllreduceAlgorithm::kSharedMemory;
  KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o).WithContext(key));
  ReduceSpec spec{seed, op, t, set_size, prescale, postscale};
  const std::string bad = CheckReduction(spec, b.out, count);
  ctx.Check(bad.empty(), key + ": " + bad);
  ctx.RecordDigest(key, Digest(b.out, count * DataTypeSize(t)));
  return OkStatus();
}

WorldSpec ShmWorld(int size) {
  WorldSpec spec;
  spec.size = size;
  spec.transport = TransportKind::kShm;
  return spec;
}

struct Shape {
  DataType type;
  ReduceOp op;
  size_t count;
  bool in_place;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  // 1 element (one rank owns the only block), odd counts, and more than one 1 MiB piece.
  for (size_t n : {size_t{1}, size_t{7}, size_t{100003}, size_t{1000003}}) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct}) {
        shapes.push_back({t, op, n, (n + static_cast<size_t>(op)) % 2 == 0});
      }
    }
  }
  shapes.push_back({DataType::kFloat64, ReduceOp::kSum, 4194307, true});
  shapes.push_back({DataType::kBFloat16, ReduceOp::kAverage, 4194307, false});
  return shapes;
}

std::string Key(const Shape& s) {
  return std::string(DataTypeName(s.type)) + " " + ReduceOpName(s.op) + " x" +
         std::to_string(s.count) + (s.in_place ? " in place" : "");
}

class SharedMemoryAllreduce : public ::testing::TestWithParam<int> {};

// Tensors in every rank's registered region: the peers read them in place.
TEST_P(SharedMemoryAllreduce, ReducesStraightFromThePeersRegions) {
  Regions regions("direct");
  WorldSpec spec = ShmWorld(GetParam());
  spec.customize = [&](WorldOptions& o) { regions.Register(o); };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    std::byte* base = regions.base(ctx.rank());
    PhaseLog phases(ctx.comm());
    for (const Shape& s : Shapes()) {
      // Somewhere other than the region's start, as a tensor in an arena heap would be.
      Buffers b{base + 4096, s.in_place ? base + 4096 : base + (size_t{32} << 20)};
      KV_RETURN_IF_ERROR(RunAndCheck(ctx, Key(s), b, s.count, s.type, s.op));
    }
    ctx.Check(phases.saw("SHM_REDUCE"), "no SHM_REDUCE phase");
    ctx.Check(!phases.saw("SHM_COPY_IN"), "tensors in the regions were copied in");
    return OkStatus();
  }));
}

// Plain memory on every rank: each piece goes through the windows.
TEST_P(SharedMemoryAllreduce, PrivateBuffersGoThroughTheWindows) {
  ExpectAllRanksOk(RunThreadRanks(ShmWorld(GetParam()), [&](RankContext& ctx) -> Status {
    PhaseLog phases(ctx.comm());
    for (const Shape& s : Shapes()) {
      const size_t bytes = s.count * DataTypeSize(s.type);
      std::vector<std::byte> in(bytes), out(bytes);
      KV_RETURN_IF_ERROR(RunAndCheck(ctx, Key(s), {in.data(), s.in_place ? in.data() : out.data()},
                                     s.count, s.type, s.op));
    }
    ctx.Check(phases.saw("SHM_COPY_IN"), "private buffers were not copied in");
    return OkStatus();
  }));
}

// One rank's tensor is plain memory, the others' in their regions: every rank takes the windows.
// Then prescaling, which cannot happen in a buffer the peers read, on tensors in the regions.
TEST_P(SharedMemoryAllreduce, RanksAgreeOnThePathWhenOneBufferIsPrivate) {
  Regions regions("mixed");
  WorldSpec spec = ShmWorld(GetParam());
  spec.customize = [&](WorldOptions& o) { regions.Register(o); };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    const size_t n = 1000003;
    std::vector<std::byte> private_buf(n * 4);
    std::byte* mine = ctx.rank() == 1 ? private_buf.data() : regions.base(ctx.rank()) + 64;
    KV_RETURN_IF_ERROR(
        RunAndCheck(ctx, "rank 1 private", {mine, mine}, n, DataType::kFloat32, ReduceOp::kSum));
    std::byte* in_region = regions.base(ctx.rank()) + 64;
    KV_RETURN_IF_ERROR(RunAndCheck(ctx, "prescaled", {in_region, in_region}, n, DataType::kFloat32,
                                   ReduceOp::kAverage, nullptr, 2.0, 0.5));
    // And the direct path again afterwards: the barrier counts stayed in step.
    KV_RETURN_IF_ERROR(RunAndCheck(ctx, "direct after", {in_region, in_region}, n,
                                   DataType::kFloat32, ReduceOp::kMax));
    return OkStatus();
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, SharedMemoryAllreduce, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Windows of 64 bytes: pieces of 32 bytes, hundreds of them per op, and float64 elements that
// fill a piece with 4.
TEST(SharedMemoryAllreduceWindow, TinyWindowsStillReduceEverything) {
  WorldSpec spec = ShmWorld(3);
  spec.customize = [](WorldOptions& o) { o.shm_window_bytes = 64; };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    for (size_t n : {size_t{1}, size_t{5}, size_t{3001}}) {
      std::vector<std::byte> buf(n * 8);
      KV_RETURN_IF_ERROR(RunAndCheck(ctx, "float64 x" + std::to_string(n), {buf.data(), buf.data()},
                                     n, DataType::kFloat64, ReduceOp::kSum));
    }
    return OkStatus();
  }));
}

// Ranks 0 and 2 reduce in a process set while rank 1 does not take part; then all three reduce.
// The barrier counts are per pair, so rank 1 is not taken for having arrived.
TEST(SharedMemoryAllreduceSets, ASubsetThenTheWorldStayInStep) {
  Regions regions("sets");
  WorldSpec spec = ShmWorld(3);
  spec.customize = [&](WorldOptions& o) { regions.Register(o); };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    std::byte* buf = regions.base(ctx.rank());
    KV_ASSIGN_OR_RETURN(ProcessSet pair, ProcessSet::Create({0, 2}, 3, ctx.rank()));
    if (ctx.rank() != 1) {
      for (int i = 0; i < 3; ++i) {
        KV_RETURN_IF_ERROR(RunAndCheck(ctx, "pair " + std::to_string(i), {buf, buf}, 300007,
                                       DataType::kFloat32, ReduceOp::kSum, &pair));
      }
    }
    return RunAndCheck(ctx, "world", {buf, buf}, 300007, DataType::kInt32, ReduceOp::kSum);
  }));
}

// A rank that never arrives: the others' error names it, within the op deadline.
TEST(SharedMemoryAllreduceFailure, AMissingRankIsNamedAtTheDeadline) {
  WorldSpec spec = ShmWorld(3);
  spec.op_timeout = std::chrono::milliseconds(1500);
  ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    if (ctx.rank() == 2) return OkStatus();
    std::vector<float> buf(1 << 20, 1.0f);
    AllreduceOptions o;
    o.input = o.output = buf.data();
    o.count = buf.size();
    o.algorithm = AllreduceAlgorithm::kSharedMemory;
    Status s = Allreduce(ctx.comm(), o);
    ctx.Check(!s.ok(), "the allreduce succeeded without rank 2");
    ctx.Check(s.ToString().find("rank 2") != std::string::npos,
              "the error does not name rank 2: " + s.ToString());
    return OkStatus();
  });
  ExpectAllRanksOk(world);
}

// Asked for over TCP, the algorithm is refused with the reason rather than run another way.
TEST(SharedMemoryAllreduceFailure, TcpRefusesTheAlgorithmNamingTheTransport) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    std::vector<float> buf(1024, 1.0f);
    AllreduceOptions o;
    o.input = o.output = buf.data();
    o.count = buf.size();
    o.algorithm = AllreduceAlgorithm::kSharedMemory;
    Status s = Allreduce(ctx.comm(), o);
    ctx.Check(s.code() == StatusCode::kInvalidArgument, "not InvalidArgument: " + s.ToString());
    ctx.Check(s.ToString().find("tcp") != std::string::npos, "no transport named: " + s.ToString());
    return OkStatus();
  }));
}

}  // namespace
}  // namespace korovod::testing
