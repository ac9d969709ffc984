// Every collective against a reference computed in the test, swept over reduce ops, data types,
// element counts, world sizes and transports.
//
// One world is created per test (transport x ranks x part) and runs its whole list of cases in
// order, as a user's training loop would. Each case checks, on the rank(s) that hold it:
//   - the values, exactly (average in floating types: within ReduceTolerance, see test_data.h);
//   - that every rank that should hold the same result holds the same bits (digests compared
//     after the run);
//   - that an out-of-place collective leaves its input untouched.
// The large element counts dominate the run time, so they are split into their own tests and use
// a subset of types and ops; the small counts (0, 1, 7) run the full cross product.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/collectives/collectives.h"
#include "runtime/world/communicator.h"
#include "tests/runtime/rank_harness.h"
#include "tests/runtime/test_data.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod::testing {
namespace {

constexpr size_t kSmallCounts[] = {0, 1, 7};
constexpr size_t kMedium = 1000003;  // crosses TCP striping and shm slot boundaries unevenly
constexpr size_t kLarge = 4194307;   // 4 Mi + 3 elements

enum class Kind { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReduceScatter, kBarrier };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAlltoall:
      return "alltoall";
    case Kind::kReduceScatter:
      return "reducescatter";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

struct Case {
  Kind kind = Kind::kAllreduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;  // allreduce/broadcast: elements; allgather/reducescatter: total; alltoall:
                     // about this many elements sent per rank
  bool in_place = false;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  bool uneven = false;

  std::string Name() const {
    std::string s = KindName(kind);
    if (kind == Kind::kBarrier) return s;
    if (kind == Kind::kAllreduce || kind == Kind::kReduceScatter) {
      s += std::string(" ") + ReduceOpName(op);
    }
    s += std::string(" ") + DataTypeName(type) + " n=" + std::to_string(count);
    if (kind == Kind::kAllreduce) {
      s += in_place ? " in-place" : " out-of-place";
      if (algorithm != AllreduceAlgorithm::kAuto) {
        s += std::string(" algorithm=") + AllreduceAlgorithmName(algorithm);
      }
    }
    if (prescale != 1.0 || postscale != 1.0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " prescale=%g postscale=%g", prescale, postscale);
      s += buf;
    }
    if (kind == Kind::kBroadcast) s += " root=" + std::to_string(root);
    if (kind == Kind::kAllgather || kind == Kind::kAlltoall || kind == Kind::kReduceScatter) {
      s += uneven ? " uneven" : " even";
    }
    return s;
  }
};

// Each part is its own ctest entry (one world each), so ctest -j2 spreads them over the cores.
enum class Part { kSmall, kAllreduceMedium, kAllreduceLarge, kOthersMedium, kOthersLarge };

const char* PartName(Part p) {
  switch (p) {
    case Part::kSmall:
      return "small";
    case Part::kAllreduceMedium:
      return "allreduce_1000003";
    case Part::kAllreduceLarge:
      return "allreduce_4194307";
    case Part::kOthersMedium:
      return "others_1000003";
    case Part::kOthersLarge:
      return "others_4194307";
  }
  return "?";
}

// Scale factors whose effect is exact: powers of two and small integers.
struct Scaling {
  double pre, post;
};
std::vector<Scaling> ScalingsFor(DataType t) {
  if (IsFloat(t)) return {{2.0, 0.5}, {0.5, 3.0}};
  return {{3.0, 0.5}};  // integers: trunc((sum of 3v) * 0.5), order-independent
}

Case Allreduce(DataType t, ReduceOp op, size_t n, bool in_place = false,
               AllreduceAlgorithm a = AllreduceAlgorithm::kAuto) {
  Case c;
  c.kind = Kind::kAllreduce;
  c.type = t;
  c.op = op;
  c.count = n;
  c.in_place = in_place;
  c.algorithm = a;
  return c;
}

Case Moving(Kind k, DataType t, size_t n, bool uneven, int root = 0) {
  Case c;
  c.kind = k;
  c.type = t;
  c.count = n;
  c.uneven = uneven;
  c.root = root;
  return c;
}

Case ReduceScatter(DataType t, ReduceOp op, size_t n, bool uneven) {
  Case c = Moving(Kind::kReduceScatter, t, n, uneven);
  c.op = op;
  return c;
}

std::vector<Case> BuildCases(Part part, int size) {
  std::vector<Case> cases;
  const auto add = [&](const Case& c) { cases.push_back(c); };
  constexpr AllreduceAlgorithm kForced[] = {AllreduceAlgorithm::kRing,
                                            AllreduceAlgorithm::kRecursiveDoubling};
  switch (part) {
    case Part::kSmall: {
      Case barrier;
      barrier.kind = Kind::kBarrier;
      add(barrier);
      for (DataType t : kAllDataTypes) {
        for (size_t n : kSmallCounts) {
          for (ReduceOp op : kAllReduceOps) {
            add(Allreduce(t, op, n, false));
            add(Allreduce(t, op, n, true));
            for (AllreduceAlgorithm a : kForced) add(Allreduce(t, op, n, n % 2 == 1, a));
            add(ReduceScatter(t, op, n, false));
            add(ReduceScatter(t, op, n, true));
          }
          for (bool uneven : {false, true}) {
            add(Moving(Kind::kAllgather, t, n, uneven));
            add(Moving(Kind::kAlltoall, t, n, uneven));
          }
          for (int root = 0; root < size; ++root) add(Moving(Kind::kBroadcast, t, n, false, root));
        }
        for (Scaling s : ScalingsFor(t)) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
            if (op == ReduceOp::kAverage && !IsFloat(t)) continue;
            Case c = Allreduce(t, op, 7, false);
            c.prescale = s.pre;
            c.postscale = s.post;
            add(c);
            c.in_place = true;
            add(c);
            Case rs = ReduceScatter(t, op, 7, true);
            rs.prescale = s.pre;
            rs.postscale = s.post;
            add(rs);
          }
        }
      }
      add(barrier);
      add(barrier);
      break;
    }
    case Part::kAllreduceMedium: {
      // Every type with every op, alternating in place and out of place.
      for (DataType t : kAllDataTypes) {
        for (ReduceOp op : kAllReduceOps) {
          add(Allreduce(t, op, kMedium, (static_cast<int>(t) + static_cast<int>(op)) % 2 == 0));
        }
      }
      for (AllreduceAlgorithm a : kForced) {
        for (DataType t : kAllDataTypes) add(Allreduce(t, ReduceOp::kSum, kMedium, false, a));
        for (ReduceOp op :
             {ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
          add(Allreduce(DataType::kFloat16, op, kMedium, true, a));
        }
      }
      for (DataType t : kAllDataTypes) {
        const Scaling sc = ScalingsFor(t).back();
        Case c = Allreduce(t, IsFloat(t) ? ReduceOp::kAverage : ReduceOp::kSum, kMedium, false);
        c.prescale = sc.pre;
        c.postscale = sc.post;
        add(c);
      }
      break;
    }
    case Part::kAllreduceLarge: {
      // Every type with every op, as for the medium size.
      for (DataType t : kAllDataTypes) {
        for (ReduceOp op : kAllReduceOps) {
          add(Allreduce(t, op, kLarge, (static_cast<int>(t) + static_cast<int>(op)) % 2 == 1));
        }
      }
      for (AllreduceAlgorithm a : kForced) {
        add(Allreduce(DataType::kFloat32, ReduceOp::kSum, kLarge, false, a));
        add(Allreduce(DataType::kFloat16, ReduceOp::kMax, kLarge, true, a));
      }
      Case scaled = Allreduce(DataType::kFloat32, ReduceOp::kSum, kLarge, true);
      scaled.prescale = 2.0;
      scaled.postscale = 0.5;
      add(scaled);
      break;
    }
    case Part::kOthersMedium:
    case Part::kOthersLarge: {
      const bool medium = part == Part::kOthersMedium;
      const size_t n = medium ? kMedium : kLarge;
      const std::vector<DataType> types(std::begin(kAllDataTypes), std::end(kAllDataTypes));
      for (size_t i = 0; i < types.size(); ++i) {
        const DataType t = types[i];
        const bool uneven = i % 2 == 0;
        add(Moving(Kind::kAllgather, t, n, uneven));
        add(Moving(Kind::kAlltoall, t, n, !uneven));
        // Roots: the first, the last and one in the middle, rotating over the types.
        const int roots[] = {0, size - 1, size / 2};
        add(Moving(Kind::kBroadcast, t, n, false, roots[i % 3]));
        add(ReduceScatter(t, kAllReduceOps[i % 5], n, uneven));
      }
      // Reducescatter: every op on every type (the loop above covered one op per type).
      for (size_t i = 0; i < types.size(); ++i) {
        for (ReduceOp op : kAllReduceOps) {
          if (op != kAllReduceOps[i % 5]) add(ReduceScatter(types[i], op, n, true));
        }
      }
      if (medium) {
        Case scaled = ReduceScatter(DataType::kFloat16, ReduceOp::kSum, n, false);
        scaled.prescale = 2.0;
        scaled.postscale = 0.5;
        add(scaled);
        for (int root = 0; root < size; ++root) {
          add(Moving(Kind::kBroadcast, DataType::kUint8, n, false, root));
        }
      }
      break;
    }
  }
  return cases;
}

std::vector<size_t> Offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t j = 0; j < counts.size(); ++j) off[j + 1] = off[j] + counts[j];
  return off;
}

// State shared by the ranks of one world (they are threads of this process).
struct Shared {
  std::atomic<int> barrier_arrivals{0};
};

class CaseRunner {
 public:
  CaseRunner(RankContext& ctx, Shared& shared) : ctx_(ctx), shared_(shared) {}

  Status Run(const Case& c, size_t index) {
    seed_ = Mix(0x5eed0000 + index);
    // Built by appending: GCC 12 reports a false -Wrestrict on "#" + std::to_string(...).
    name_.assign(1, '#');
    name_ += std::to_string(index);
    name_ += ' ';
    name_ += c.Name();
    // The rank that checks values of results every rank holds (digests cover the others).
    checker_ = static_cast<int>(index % static_cast<size_t>(ctx_.size()));
    switch (c.kind) {
      case Kind::kAllreduce:
        return RunAllreduce(c);
      case Kind::kAllgather:
        return RunAllgather(c);
      case Kind::kBroadcast:
        return RunBroadcast(c);
      case Kind::kAlltoall:
        return RunAlltoall(c);
      case Kind::kReduceScatter:
        return RunReduceScatter(c);
      case Kind::kBarrier:
        return RunBarrier();
    }
    return Internal("unknown case");
  }

 private:
  int rank() const { return ctx_.rank(); }
  int size() const { return ctx_.size(); }
  void Fail(const std::string& what) { ctx_.Fail(name_ + ": " + what); }

  Status RunAllreduce(const Case& c) {
    const size_t esz = DataTypeSize(c.type);
    Buffer in(c.count * esz);
    Buffer out(c.in_place ? 0 : c.count * esz);
    FillReduceInput(in.data(), c.count, c.type, seed_, c.op, rank(), size());
    FillGarbage(out.data(), out.bytes());
    const uint64_t in_digest = Digest(in.data(), in.bytes());
    AllreduceOptions o;
    o.input = in.data();
    o.output = c.in_place ? in.data() : out.data();
    o.count = c.count;
    o.type = c.type;
    o.op = c.op;
    o.prescale = c.prescale;
    o.postscale = c.postscale;
    o.algorithm = c.algorithm;
    KV_RETURN_IF_ERROR(Allreduce(ctx_.comm(), o).WithContext(name_));
    const std::byte* result = c.in_place ? in.data() : out.data();
    ctx_.RecordDigest(name_, Digest(result, c.count * esz));
    if (!c.in_place && Digest(in.data(), in.bytes()) != in_digest) {
      Fail("the out-of-place allreduce modified its input");
    }
    if (rank() == checker_) {
      const ReduceSpec spec{seed_, c.op, c.type, size(), c.prescale, c.postscale};
      const std::string err = CheckReduction(spec, result, c.count);
      if (!err.empty()) Fail(err);
    }
    return OkStatus();
  }

  Status RunAllgather(const Case& c) {
    const size_t esz = DataTypeSize(c.type);
    const std::vector<size_t> counts = SplitCounts(c.count, size(), c.uneven);
    const std::vector<size_t> off = Offsets(counts);
    Buffer in(counts[rank()] * esz);
    Buffer out(c.count * esz);
    FillMoveValues(in.data(), counts[rank()], c.type, seed_, rank(), 0);
    FillGarbage(out.data(), out.bytes());
    const uint64_t in_digest = Digest(in.data(), in.bytes());
    AllgatherOptions o;
    o.input = in.data();
    o.output = out.data();
    o.counts = counts;
    o.type = c.type;
    KV_RETURN_IF_ERROR(Allgather(ctx_.comm(), o).WithContext(name_));
    ctx_.RecordDigest(name_, Digest(out.data(), out.bytes()));
    if (Digest(in.data(), in.bytes()) != in_digest) Fail("allgather modified its input");
    if (rank() == checker_) {
      for (int j = 0; j < size(); ++j) {
        const std::string err =
            CheckMoveValues(out.data() + off[j] * esz, counts[j], c.type, seed_, j, 0);
        if (!err.empty()) Fail("block from rank " + std::to_string(j) + ": " + err);
      }
    }
    return OkStatus();
  }

  Status RunBroadcast(const Case& c) {
    const size_t esz = DataTypeSize(c.type);
    Buffer buf(c.count * esz);
    if (rank() == c.root) {
      FillMoveValues(buf.data(), c.count, c.type, seed_, c.root, 0);
    } else {
      FillGarbage(buf.data(), buf.bytes());
    }
    BroadcastOptions o;
    o.buffer = buf.data();
    o.count = c.count;
    o.type = c.type;
    o.root = c.root;
    KV_RETURN_IF_ERROR(Broadcast(ctx_.comm(), o).WithContext(name_));
    ctx_.RecordDigest(name_, Digest(buf.data(), buf.bytes()));
    if (rank() == checker_ || rank() == c.root) {
      const std::string err = CheckMoveValues(buf.data(), c.count, c.type, seed_, c.root, 0);
      if (!err.empty()) Fail(err);
    }
    return OkStatus();
  }

  Status RunAlltoall(const Case& c) {
    const size_t esz = DataTypeSize(c.type);
    std::vector<size_t> send(size()), recv(size());
    for (int j = 0; j < size(); ++j) {
      send[j] = AlltoallCount(c.count, size(), rank(), j, c.uneven);
      recv[j] = AlltoallCount(c.count, size(), j, rank(), c.uneven);
    }
    const std::vector<size_t> soff = Offsets(send);
    const std::vector<size_t> roff = Offsets(recv);
    Buffer in(soff.back() * esz);
    Buffer out(roff.back() * esz);
    for (int j = 0; j < size(); ++j) {
      FillMoveValues(in.data() + soff[j] * esz, send[j], c.type, seed_, rank(), j);
    }
    FillGarbage(out.data(), out.bytes());
    const uint64_t in_digest = Digest(in.data(), in.bytes());
    AlltoallOptions o;
    o.input = in.data();
    o.output = out.data();
    o.send_counts = send;
    o.recv_counts = recv;
    o.type = c.type;
    KV_RETURN_IF_ERROR(Alltoall(ctx_.comm(), o).WithContext(name_));
    if (Digest(in.data(), in.bytes()) != in_digest) Fail("alltoall modified its input");
    for (int j = 0; j < size(); ++j) {
      const std::string err =
          CheckMoveValues(out.data() + roff[j] * esz, recv[j], c.type, seed_, j, rank());
      if (!err.empty()) Fail("block from rank " + std::to_string(j) + ": " + err);
    }
    return OkStatus();
  }

  Status RunReduceScatter(const Case& c) {
    const size_t esz = DataTypeSize(c.type);
    const std::vector<size_t> counts = SplitCounts(c.count, size(), c.uneven);
    const std::vector<size_t> off = Offsets(counts);
    Buffer in(c.count * esz);
    Buffer out(counts[rank()] * esz);
    FillReduceInput(in.data(), c.count, c.type, seed_, c.op, rank(), size());
    FillGarbage(out.data(), out.bytes());
    const uint64_t in_digest = Digest(in.data(), in.bytes());
    ReduceScatterOptions o;
    o.input = in.data();
    o.output = out.data();
    o.recv_counts = counts;
    o.type = c.type;
    o.op = c.op;
    o.prescale = c.prescale;
    o.postscale = c.postscale;
    KV_RETURN_IF_ERROR(ReduceScatter(ctx_.comm(), o).WithContext(name_));
    if (Digest(in.data(), in.bytes()) != in_digest) Fail("reducescatter modified its input");
    const ReduceSpec spec{seed_, c.op, c.type, size(), c.prescale, c.postscale};
    const std::string err = CheckReduction(spec, out.data(), counts[rank()], off[rank()]);
    if (!err.empty()) Fail(err);
    return OkStatus();
  }

  // No rank may leave barrier k before every rank has entered it; one rank arrives late.
  Status RunBarrier() {
    const int k = barriers_++;
    if (rank() == k % size()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    shared_.barrier_arrivals.fetch_add(1);
    KV_RETURN_IF_ERROR(Barrier(ctx_.comm()).WithContext(name_));
    const int seen = shared_.barrier_arrivals.load();
    if (seen < (k + 1) * size()) {
      Fail("left the barrier after " + std::to_string(seen) + " arrivals, expected at least " +
           std::to_string((k + 1) * size()));
    }
    return OkStatus();
  }

  RankContext& ctx_;
  Shared& shared_;
  uint64_t seed_ = 0;
  std::string name_;
  int checker_ = 0;
  int barriers_ = 0;
};

struct SweepParam {
  TransportKind transport;
  int ranks;
  Part part;
};

void PrintTo(const SweepParam& p, std::ostream* os) {
  *os << TransportName(p.transport) << ", " << p.ranks << " ranks, " << PartName(p.part);
}

class CollectivesSweep : public ::testing::TestWithParam<SweepParam> {};

// Runs `cases` in order on every rank of a world built from `spec` and checks them.
void RunCases(const WorldSpec& spec, const std::vector<Case>& cases) {
  Shared shared;
  const auto start = std::chrono::steady_clock::now();
  const ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    CaseRunner runner(ctx, shared);
    for (size_t i = 0; i < cases.size(); ++i) KV_RETURN_IF_ERROR(runner.Run(cases[i], i));
    return OkStatus();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu cases on %d %s ranks in %.2f s\n", cases.size(), spec.size,
              TransportName(spec.transport), seconds);
  ExpectAllRanksOk(world);
}

TEST_P(CollectivesSweep, MatchesReference) {
  const SweepParam p = GetParam();
  WorldSpec spec;
  spec.size = p.ranks;
  spec.transport = p.transport;
  RunCases(spec, BuildCases(p.part, p.ranks));
}

std::vector<SweepParam> AllParams() {
  std::vector<SweepParam> params;
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    for (int n : {1, 2, 3, 4, 8}) {
      for (Part part : {Part::kSmall, Part::kAllreduceMedium, Part::kAllreduceLarge,
                        Part::kOthersMedium, Part::kOthersLarge}) {
        params.push_back({t, n, part});
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(World, CollectivesSweep, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           return std::string(TransportName(info.param.transport)) + "_" +
                                  std::to_string(info.param.ranks) + "ranks_" +
                                  PartName(info.param.part);
                         });

// ---- Transport and algorithm knobs of WorldOptions ----

struct Tuning {
  const char* name;
  TransportKind transport;
  std::function<void(WorldOptions&)> apply;
};

void PrintTo(const Tuning& t, std::ostream* os) { *os << t.name; }

std::vector<Tuning> Tunings() {
  return {
      {"tcp_one_stream", TransportKind::kTcp, [](WorldOptions& o) { o.tcp_streams = 1; }},
      {"tcp_3_streams_stripe_4k", TransportKind::kTcp,
       [](WorldOptions& o) {
         o.tcp_streams = 3;
         o.tcp_stripe_min = 4096;
       }},
      {"shm_2_slots_of_4k", TransportKind::kShm,
       [](WorldOptions& o) {
         o.shm_slots = 2;
         o.shm_slot_bytes = 4096;
       }},
      {"shm_3_slots_of_12k", TransportKind::kShm,
       [](WorldOptions& o) {
         o.shm_slots = 3;
         o.shm_slot_bytes = 3 * 4096;
       }},
      {"shm_no_window_ring", TransportKind::kShm, [](WorldOptions& o) { o.shm_window_bytes = 0; }},
      {"shm_window_4k", TransportKind::kShm, [](WorldOptions& o) { o.shm_window_bytes = 4096; }},
      {"tcp_always_ring", TransportKind::kTcp,
       [](WorldOptions& o) { o.small_allreduce_max_bytes = 1; }},
      {"shm_never_ring", TransportKind::kShm,
       [](WorldOptions& o) { o.small_allreduce_max_bytes = size_t{1} << 40; }},
      {"auto_transport", TransportKind::kAuto, nullptr},
  };
}

// A moderate set of cases that crosses chunk, stripe and slot boundaries.
std::vector<Case> TuningCases(int size) {
  std::vector<Case> cases;
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt8}) {
    for (size_t n : {size_t{7}, size_t{100003}, kMedium}) {
      cases.push_back(Allreduce(t, ReduceOp::kSum, n, false));
      cases.push_back(Allreduce(t, ReduceOp::kAverage, n, true));
      cases.push_back(Moving(Kind::kAllgather, t, n, true));
      cases.push_back(Moving(Kind::kBroadcast, t, n, false, size - 1));
      cases.push_back(Moving(Kind::kAlltoall, t, n, true));
      cases.push_back(ReduceScatter(t, ReduceOp::kMax, n, true));
    }
  }
  return cases;
}

class TransportTuning : public ::testing::TestWithParam<std::tuple<Tuning, int>> {};

TEST_P(TransportTuning, MatchesReference) {
  const auto& [tuning, ranks] = GetParam();
  WorldSpec spec;
  spec.size = ranks;
  spec.transport = tuning.transport;
  spec.customize = tuning.apply;
  RunCases(spec, TuningCases(ranks));
}

INSTANTIATE_TEST_SUITE_P(Options, TransportTuning,
                         ::testing::Combine(::testing::ValuesIn(Tunings()),
                                            ::testing::Values(3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<Tuning, int>>& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

}  // namespace
}  // namespace korovod::testing
