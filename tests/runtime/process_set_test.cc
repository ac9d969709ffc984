// Process sets: creation rules, collectives on several overlapping sets used in interleaved order,
// and the error a rank outside a set gets.
#include "runtime/world/process_set.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/collectives/collectives.h"
#include "runtime/world/communicator.h"
#include "tests/runtime/rank_harness.h"
#include "tests/runtime/test_data.h"

namespace korovod::testing {
namespace {

// ---- Creation ----

TEST(ProcessSetCreate, SortsRanksAndNumbersMembersBySortedOrder) {
  auto set = ProcessSet::Create({3, 0, 2}, 4, 2);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->ranks(), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(set->size(), 3);
  EXPECT_TRUE(set->contains_me());
  EXPECT_EQ(set->rank(), 1);
  EXPECT_EQ(set->global_rank(2), 3);
}

TEST(ProcessSetCreate, NonMemberHasNoSetRank) {
  auto set = ProcessSet::Create({1, 3}, 4, 2);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_FALSE(set->contains_me());
  EXPECT_EQ(set->rank(), -1);
}

TEST(ProcessSetCreate, WorldHoldsEveryRankInOrder) {
  const ProcessSet w = ProcessSet::World(5, 3);
  EXPECT_EQ(w.ranks(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(w.rank(), 3);
}

TEST(ProcessSetCreate, RejectsDuplicates) {
  auto set = ProcessSet::Create({1, 2, 1}, 4, 0);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(set.status().message().find("rank 1"), std::string::npos) << set.status().ToString();
}

TEST(ProcessSetCreate, RejectsRanksOutsideTheWorld) {
  for (const std::vector<int>& ranks : {std::vector<int>{0, 4}, std::vector<int>{-1, 2}}) {
    auto set = ProcessSet::Create(ranks, 4, 0);
    ASSERT_FALSE(set.ok()) << "ranks " << ranks[0] << "," << ranks[1];
    EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
    const std::string bad = std::to_string(ranks[0] == 0 ? ranks[1] : ranks[0]);
    EXPECT_NE(set.status().message().find(bad), std::string::npos) << set.status().ToString();
  }
}

TEST(ProcessSetCreate, RejectsEmptySet) {
  auto set = ProcessSet::Create({}, 4, 0);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kInvalidArgument);
}

// ---- Collectives on sets ----

enum class Op { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReduceScatter, kBarrier };

struct Step {
  int set;  // index into the sets of the test
  Op op;
  size_t count;
};

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return "allreduce";
    case Op::kAllgather:
      return "allgather";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kAlltoall:
      return "alltoall";
    case Op::kReduceScatter:
      return "reducescatter";
    case Op::kBarrier:
      return "barrier";
  }
  return "?";
}

std::string SetName(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ranks[i]);
  }
  return s + "}";
}

// Runs one step on a member of `set` and checks it; values name global ranks so that set-rank
// order (sorted global ranks) is checked too.
Status RunStep(RankContext& ctx, const ProcessSet& set, const Step& step, size_t index) {
  const uint64_t seed = Mix(0x5e7 + index);
  std::string name = "#";  // appended piecewise: GCC 12 -Wrestrict false positive on "#" + ...
  name += std::to_string(index);
  name += std::string(" ") + OpName(step.op) + " on " + SetName(set.ranks());
  name += " n=" + std::to_string(step.count);
  const int me = set.rank();
  const int n = set.size();
  const DataType t = index % 2 ? DataType::kFloat32 : DataType::kInt32;
  const size_t esz = DataTypeSize(t);
  auto fail = [&](const std::string& what) { ctx.Fail(name + ": " + what); };
  switch (step.op) {
    case Op::kAllreduce: {
      const ReduceOp op = index % 3 ? ReduceOp::kSum : ReduceOp::kMax;
      Buffer buf(step.count * esz);
      FillReduceInput(buf.data(), step.count, t, seed, op, me, n);
      AllreduceOptions o;
      o.input = o.output = buf.data();
      o.count = step.count;
      o.type = t;
      o.op = op;
      o.set = &set;
      KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o).WithContext(name));
      ctx.RecordDigest(name, Digest(buf.data(), buf.bytes()));
      const std::string err = CheckReduction({seed, op, t, n, 1.0, 1.0}, buf.data(), step.count);
      if (!err.empty()) fail(err);
      return OkStatus();
    }
    case Op::kAllgather: {
      const std::vector<size_t> counts = SplitCounts(step.count, n, true);
      size_t off = 0;
      Buffer in(counts[me] * esz), out(step.count * esz);
      FillMoveValues(in.data(), counts[me], t, seed, ctx.rank(), 0);
      FillGarbage(out.data(), out.bytes());
      AllgatherOptions o;
      o.input = in.data();
      o.output = out.data();
      o.counts = counts;
      o.type = t;
      o.set = &set;
      KV_RETURN_IF_ERROR(Allgather(ctx.comm(), o).WithContext(name));
      ctx.RecordDigest(name, Digest(out.data(), out.bytes()));
      for (int j = 0; j < n; ++j) {
        const std::string err =
            CheckMoveValues(out.data() + off * esz, counts[j], t, seed, set.global_rank(j), 0);
        if (!err.empty()) fail("block of set rank " + std::to_string(j) + ": " + err);
        off += counts[j];
      }
      return OkStatus();
    }
    case Op::kBroadcast: {
      const int root = n - 1;  // the set rank, not the global rank
      const int root_global = set.global_rank(root);
      Buffer buf(step.count * esz);
      if (me == root) {
        FillMoveValues(buf.data(), step.count, t, seed, root_global, 0);
      } else {
        FillGarbage(buf.data(), buf.bytes());
      }
      BroadcastOptions o;
      o.buffer = buf.data();
      o.count = step.count;
      o.type = t;
      o.root = root;
      o.set = &set;
      KV_RETURN_IF_ERROR(Broadcast(ctx.comm(), o).WithContext(name));
      ctx.RecordDigest(name, Digest(buf.data(), buf.bytes()));
      const std::string err = CheckMoveValues(buf.data(), step.count, t, seed, root_global, 0);
      if (!err.empty()) fail(err);
      return OkStatus();
    }
    case Op::kAlltoall: {
      std::vector<size_t> send(n), recv(n);
      size_t send_total = 0, recv_total = 0;
      for (int j = 0; j < n; ++j) {
        send[j] = AlltoallCount(step.count, n, me, j, true);
        recv[j] = AlltoallCount(step.count, n, j, me, true);
        send_total += send[j];
        recv_total += recv[j];
      }
      Buffer in(send_total * esz), out(recv_total * esz);
      size_t off = 0;
      for (int j = 0; j < n; ++j) {
        FillMoveValues(in.data() + off * esz, send[j], t, seed, ctx.rank(), set.global_rank(j));
        off += send[j];
      }
      FillGarbage(out.data(), out.bytes());
      AlltoallOptions o;
      o.input = in.data();
      o.output = out.data();
      o.send_counts = send;
      o.recv_counts = recv;
      o.type = t;
      o.set = &set;
      KV_RETURN_IF_ERROR(Alltoall(ctx.comm(), o).WithContext(name));
      off = 0;
      for (int j = 0; j < n; ++j) {
        const std::string err = CheckMoveValues(out.data() + off * esz, recv[j], t, seed,
                                                set.global_rank(j), ctx.rank());
        if (!err.empty()) fail("block from set rank " + std::to_string(j) + ": " + err);
        off += recv[j];
      }
      return OkStatus();
    }
    case Op::kReduceScatter: {
      const std::vector<size_t> counts = SplitCounts(step.count, n, false);
      size_t first = 0;
      for (int j = 0; j < me; ++j) first += counts[j];
      Buffer in(step.count * esz), out(counts[me] * esz);
      FillReduceInput(in.data(), step.count, t, seed, ReduceOp::kSum, me, n);
      FillGarbage(out.data(), out.bytes());
      ReduceScatterOptions o;
      o.input = in.data();
      o.output = out.data();
      o.recv_counts = counts;
      o.type = t;
      o.set = &set;
      KV_RETURN_IF_ERROR(ReduceScatter(ctx.comm(), o).WithContext(name));
      const std::string err =
          CheckReduction({seed, ReduceOp::kSum, t, n, 1.0, 1.0}, out.data(), counts[me], first);
      if (!err.empty()) fail(err);
      return OkStatus();
    }
    case Op::kBarrier:
      return Barrier(ctx.comm(), &set).WithContext(name);
  }
  return Internal("unknown step");
}

class ProcessSetCollectives : public ::testing::TestWithParam<TransportKind> {};

// Six sets live at once in a world of 4, overlapping every way ({0,2} and {1,3} are disjoint,
// {0,1,2} overlaps both, {3} is a single rank, {0,3} is listed unsorted). Every rank walks the same
// script and runs the steps of the sets it belongs to, so steps of different sets interleave on
// every rank, and disjoint sets run at the same time.
TEST_P(ProcessSetCollectives, InterleavedOverlappingSets) {
  const std::vector<std::vector<int>> members = {{0, 2}, {1, 3}, {2, 1, 0},
                                                 {3},    {3, 0}, {0, 1, 2, 3}};
  std::vector<Step> script;
  const Op ops[] = {Op::kAllreduce, Op::kAllgather,     Op::kBroadcast,
                    Op::kAlltoall,  Op::kReduceScatter, Op::kBarrier};
  const size_t counts[] = {1, 7, 1000, 70001};
  for (int round = 0; round < 4; ++round) {
    for (size_t o = 0; o < std::size(ops); ++o) {
      for (size_t s = 0; s < members.size(); ++s) {
        script.push_back({static_cast<int>(s), ops[(o + s + round) % std::size(ops)],
                          counts[(o + s * 3 + round) % std::size(counts)]});
      }
    }
  }
  WorldSpec spec;
  spec.size = 4;
  spec.transport = GetParam();
  const ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    std::vector<ProcessSet> sets;
    for (const auto& m : members) {
      auto set = ProcessSet::Create(m, ctx.size(), ctx.rank());
      if (!set.ok()) return set.status();
      sets.push_back(std::move(set).value());
    }
    for (size_t i = 0; i < script.size(); ++i) {
      const ProcessSet& set = sets[script[i].set];
      if (!set.contains_me()) continue;
      KV_RETURN_IF_ERROR(RunStep(ctx, set, script[i], i));
    }
    return OkStatus();
  });
  ExpectAllRanksOk(world);
}

// A rank outside the set gets an immediate, clear error from every collective, and its
// communicator keeps working: the world allreduce afterwards succeeds on every rank.
TEST_P(ProcessSetCollectives, NonMemberGetsAnErrorAndStaysUsable) {
  WorldSpec spec;
  spec.size = 3;
  spec.transport = GetParam();
  const ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    auto pair = ProcessSet::Create({0, 1}, 3, ctx.rank());
    if (!pair.ok()) return pair.status();
    const ProcessSet& set = pair.value();
    float x[4] = {1, 2, 3, 4};
    float y[12] = {};
    const size_t two[] = {2, 2};
    if (set.contains_me()) {
      AllreduceOptions o;
      o.input = o.output = x;
      o.count = 4;
      o.set = &set;
      KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o));
      ctx.Check(x[0] == 2 && x[3] == 8, "allreduce on {0,1} gave wrong values");
    } else {
      auto expect_refused = [&](const char* what, const Status& s) {
        const bool clear_code =
            s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kInvalidArgument;
        ctx.Check(clear_code, std::string(what) + " by a non-member returned " + s.ToString() +
                                  ", expected FAILED_PRECONDITION or INVALID_ARGUMENT");
        ctx.Check(s.message().find("member") != std::string::npos,
                  std::string(what) + " by a non-member: message does not say why: " + s.message());
      };
      AllreduceOptions ar;
      ar.input = ar.output = x;
      ar.count = 4;
      ar.set = &set;
      expect_refused("allreduce", Allreduce(ctx.comm(), ar));
      AllgatherOptions ag;
      ag.input = x;
      ag.output = y;
      ag.counts = two;
      ag.set = &set;
      expect_refused("allgather", Allgather(ctx.comm(), ag));
      BroadcastOptions bc;
      bc.buffer = x;
      bc.count = 4;
      bc.set = &set;
      expect_refused("broadcast", Broadcast(ctx.comm(), bc));
      AlltoallOptions aa;
      aa.input = x;
      aa.output = y;
      aa.send_counts = two;
      aa.recv_counts = two;
      aa.set = &set;
      expect_refused("alltoall", Alltoall(ctx.comm(), aa));
      ReduceScatterOptions rs;
      rs.input = x;
      rs.output = y;
      rs.recv_counts = two;
      rs.set = &set;
      expect_refused("reducescatter", ReduceScatter(ctx.comm(), rs));
      expect_refused("barrier", Barrier(ctx.comm(), &set));
    }
    float z[3] = {1.0f * ctx.rank(), 1, 2};
    AllreduceOptions o;
    o.input = o.output = z;
    o.count = 3;
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o).WithContext("world allreduce afterwards"));
    ctx.Check(z[0] == 3 && z[1] == 3 && z[2] == 6,
              "world allreduce afterwards gave " + std::to_string(z[0]) + "," +
                  std::to_string(z[1]) + "," + std::to_string(z[2]) + ", expected 3,3,6");
    return OkStatus();
  });
  ExpectAllRanksOk(world);
}

// A set made for a larger world names ranks this communicator does not have.
TEST_P(ProcessSetCollectives, SetFromALargerWorldIsRejected) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = GetParam();
  const ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    auto big = ProcessSet::Create({0, 1, 5}, 8, ctx.rank());
    if (!big.ok()) return big.status();
    float x[2] = {1, 2};
    AllreduceOptions o;
    o.input = o.output = x;
    o.count = 2;
    o.set = &big.value();
    const Status s = Allreduce(ctx.comm(), o);
    ctx.Check(s.code() == StatusCode::kInvalidArgument,
              "allreduce on a set naming rank 5 of a 2-rank world returned " + s.ToString());
    ctx.Check(s.message().find('5') != std::string::npos,
              "the error does not name the offending rank: " + s.message());
    o.set = nullptr;
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o).WithContext("world allreduce afterwards"));
    ctx.Check(x[0] == 2 && x[1] == 4, "world allreduce afterwards gave wrong values");
    return OkStatus();
  });
  ExpectAllRanksOk(world);
}

INSTANTIATE_TEST_SUITE_P(Transport, ProcessSetCollectives,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const ::testing::TestParamInfo<TransportKind>& info) {
                           return std::string(TransportName(info.param));
                         });

}  // namespace
}  // namespace korovod::testing
