// PlanFusion: which responses run as one collective, and the fusion buffer bytes they need.
#include "runtime/core/fusion_planner.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace korovod {
namespace {

Response Allreduce(int64_t elements, DataType dtype = DataType::kFloat32,
                   ReduceOp op = ReduceOp::kSum) {
  Response r;
  r.type = OpType::kAllreduce;
  r.name = "ar";
  r.dtype = dtype;
  r.shape = {elements};
  r.op = op;
  return r;
}

Response Allgather(TensorShape trailing, std::vector<int64_t> first_dims,
                   DataType dtype = DataType::kFloat32) {
  Response r;
  r.type = OpType::kAllgather;
  r.name = "ag";
  r.dtype = dtype;
  r.shape = std::move(trailing);
  r.first_dims = std::move(first_dims);
  return r;
}

Response Other(OpType type, int64_t elements = 16) {
  Response r = Allreduce(elements);
  r.type = type;
  return r;
}

using Groups = std::vector<std::vector<int>>;

Groups GroupsOf(const std::vector<FusedOp>& plan) {
  Groups g;
  for (const FusedOp& f : plan) g.push_back(f.responses);
  return g;
}

TEST(FusionPlannerTest, FusionBytesArePaddedTo64) {
  EXPECT_EQ(FusionBytes(Allreduce(0)), 0u);
  EXPECT_EQ(FusionBytes(Allreduce(1)), 64u);
  EXPECT_EQ(FusionBytes(Allreduce(16)), 64u);   // exactly 64 bytes
  EXPECT_EQ(FusionBytes(Allreduce(17)), 128u);  // 68 bytes
  EXPECT_EQ(FusionBytes(Allreduce(1000, DataType::kFloat64)), 8000u);
  EXPECT_EQ(FusionBytes(Allreduce(3, DataType::kUint8)), 64u);
  Response r = Allreduce(0);
  r.shape = {3, 5};  // 15 float32 = 60 bytes
  EXPECT_EQ(FusionBytes(r), 64u);
}

TEST(FusionPlannerTest, AllgatherBytesCountEveryRanksRows) {
  // 2 + 0 + 5 rows of [3] float32: 84 bytes.
  EXPECT_EQ(FusionBytes(Allgather({3}, {2, 0, 5})), 128u);
  // 1-D allgather: rows of one element. 10 + 6 rows of float64 = 128 bytes.
  EXPECT_EQ(FusionBytes(Allgather({}, {10, 6}, DataType::kFloat64)), 128u);
  EXPECT_EQ(FusionBytes(Allgather({4, 4}, {0, 0})), 0u);
  EXPECT_EQ(FusionBytes(Allgather({1000}, {1, 2, 3, 4})), 40000u);
}

TEST(FusionPlannerTest, EmptyListPlansNothing) { EXPECT_TRUE(PlanFusion({}, 1 << 20).empty()); }

TEST(FusionPlannerTest, PacksInOrderUpToTheThreshold) {
  // Four tensors of 64 bytes; 192 bytes hold three.
  std::vector<Response> rs(4, Allreduce(16));
  auto plan = PlanFusion(rs, 192);
  EXPECT_EQ(GroupsOf(plan), (Groups{{0, 1, 2}, {3}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].bytes, 192u);
  EXPECT_EQ(plan[1].bytes, 64u);
}

TEST(FusionPlannerTest, ThresholdOneByteShortOfAFitStartsANewOp) {
  std::vector<Response> rs(4, Allreduce(16));
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 191)), (Groups{{0, 1}, {2, 3}}));
}

TEST(FusionPlannerTest, EverythingFitsUnderALargeThreshold) {
  std::vector<Response> rs(10, Allreduce(100));
  auto plan = PlanFusion(rs, 64 << 20);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].responses, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(plan[0].bytes, 10u * 448u);  // 400 bytes padded to 448
}

TEST(FusionPlannerTest, PaddingCountsTowardsTheThreshold) {
  // Three 4-byte tensors: 12 bytes of data, but 3 x 64 bytes of buffer.
  std::vector<Response> rs(3, Allreduce(1));
  auto plan = PlanFusion(rs, 128);
  EXPECT_EQ(GroupsOf(plan), (Groups{{0, 1}, {2}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].bytes, 128u);
}

TEST(FusionPlannerTest, LooksAheadPastAResponseThatDoesNotMatch) {
  std::vector<Response> rs = {Allreduce(16), Allreduce(16, DataType::kFloat64), Allreduce(16),
                              Allreduce(16, DataType::kFloat64)};
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 1 << 20)), (Groups{{0, 2}, {1, 3}}));
}

TEST(FusionPlannerTest, LooksAheadPastAResponseThatDoesNotFit) {
  // 64 + 1024 exceeds 200, 64 + 64 does not.
  std::vector<Response> rs = {Allreduce(16), Allreduce(256), Allreduce(16)};
  auto plan = PlanFusion(rs, 200);
  EXPECT_EQ(GroupsOf(plan), (Groups{{0, 2}, {1}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].bytes, 128u);
  EXPECT_EQ(plan[1].bytes, 1024u);
}

TEST(FusionPlannerTest, DtypeOpAndScalingSeparate) {
  Response pre = Allreduce(16);
  pre.prescale = 0.5;
  Response post = Allreduce(16);
  post.postscale = 2;
  std::vector<Response> rs = {Allreduce(16),
                              Allreduce(16, DataType::kFloat32, ReduceOp::kMax),
                              pre,
                              post,
                              Allreduce(16, DataType::kFloat16),
                              Allreduce(16),
                              Allreduce(16, DataType::kFloat32, ReduceOp::kMax),
                              pre,
                              post,
                              Allreduce(16, DataType::kFloat16)};
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 1 << 20)), (Groups{{0, 5}, {1, 6}, {2, 7}, {3, 8}, {4, 9}}));
}

TEST(FusionPlannerTest, TensorLargerThanTheThresholdRunsAlone) {
  std::vector<Response> rs = {Allreduce(1024), Allreduce(16), Allreduce(16)};
  auto plan = PlanFusion(rs, 512);
  EXPECT_EQ(GroupsOf(plan), (Groups{{0}, {1, 2}}));
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].bytes, 4096u);
}

TEST(FusionPlannerTest, TensorExactlyAtTheThresholdRunsAlone) {
  std::vector<Response> rs = {Allreduce(128), Allreduce(16)};
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 512)), (Groups{{0}, {1}}));
}

// Tensors at or above the per-tensor cap run alone (in place) while the small ones around them
// are still packed together.
TEST(FusionPlannerTest, TensorsAtTheTensorCapRunAloneAndTheRestStillFuse) {
  const std::vector<Response> list = {Allreduce(16), Allreduce(1024), Allreduce(16), Allreduce(16)};
  // Cap 4 KiB: the 1024-float (4 KiB) tensor is at the cap.
  const auto plan = PlanFusion(list, 1 << 20, 4096);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].responses, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(plan[1].responses, (std::vector<int>{1}));
  // Without a cap everything fits in one buffer.
  EXPECT_EQ(PlanFusion(list, 1 << 20, 0).size(), 1u);
}

TEST(FusionPlannerTest, ThresholdZeroRunsEveryResponseAlone) {
  std::vector<Response> rs(5, Allreduce(1));
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 0)), (Groups{{0}, {1}, {2}, {3}, {4}}));
  EXPECT_EQ(GroupsOf(PlanFusion(rs, -1)), (Groups{{0}, {1}, {2}, {3}, {4}}));
}

TEST(FusionPlannerTest, AllgathersOfOneDtypeFuseWithOtherAllgathersOnly) {
  std::vector<Response> rs = {Allgather({3}, {2, 0, 5}), Allreduce(16), Allgather({8}, {1, 1, 1}),
                              Allgather({3}, {1, 1, 1}, DataType::kInt32),
                              Allgather({}, {4, 4, 4})};
  auto plan = PlanFusion(rs, 1 << 20);
  EXPECT_EQ(GroupsOf(plan), (Groups{{0, 2, 4}, {1}, {3}}));
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].bytes, 128u + 128u + 64u);  // 84, 96 and 48 bytes, each padded
}

TEST(FusionPlannerTest, AllgatherThresholdUsesTheGatheredSize) {
  // Each allgather gathers 4 ranks x 16 float32 = 256 bytes, although each rank sends 64.
  std::vector<Response> rs(3, Allgather({16}, {1, 1, 1, 1}));
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 512)), (Groups{{0, 1}, {2}}));
}

TEST(FusionPlannerTest, ErrorsAndNonFusableOpsRunAlone) {
  Response failed = Allreduce(16);
  failed.error = "tensor \"x\": mismatched shape";
  Response failed_gather = Allgather({3}, {1, 1});
  failed_gather.error = "mismatch";
  std::vector<Response> rs = {Allreduce(16),
                              failed,
                              Other(OpType::kBroadcast),
                              Other(OpType::kBroadcast),
                              Other(OpType::kAlltoall),
                              Other(OpType::kReduceScatter),
                              Other(OpType::kReduceScatter),
                              Other(OpType::kBarrier),
                              Other(OpType::kJoin),
                              failed_gather,
                              Allgather({3}, {1, 1}),
                              Allreduce(16),
                              failed,
                              Allgather({3}, {1, 1})};
  EXPECT_EQ(GroupsOf(PlanFusion(rs, 1 << 20)),
            (Groups{{0, 11}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10, 13}, {12}}));
}

// Any list: every response planned exactly once, each op's members compatible, in list order,
// within the threshold when fused, and ops ordered by their first response.
TEST(FusionPlannerTest, RandomListsPlanEveryResponseOnceAndConsistently) {
  std::mt19937 rng(99);
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64};
  const OpType types[] = {OpType::kAllreduce, OpType::kAllreduce, OpType::kAllreduce,
                          OpType::kAllgather, OpType::kBroadcast, OpType::kReduceScatter};
  for (int iter = 0; iter < 500; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const int n = static_cast<int>(rng() % 30);
    const int64_t threshold = static_cast<int64_t>(rng() % 4096);
    std::vector<Response> rs;
    for (int i = 0; i < n; ++i) {
      const OpType t = types[rng() % std::size(types)];
      const int64_t a = rng() % 300, b = rng() % 5, c = rng() % 5;
      Response r = t == OpType::kAllgather ? Allgather({a % 50}, {b, c}) : Allreduce(a);
      r.type = t;
      r.dtype = dtypes[rng() % std::size(dtypes)];
      r.op = rng() % 2 ? ReduceOp::kSum : ReduceOp::kMin;
      if (rng() % 10 == 0) r.error = "e";
      rs.push_back(r);
    }
    auto plan = PlanFusion(rs, threshold);
    std::vector<int> seen(n, 0);
    int last_head = -1;
    for (const FusedOp& f : plan) {
      ASSERT_FALSE(f.responses.empty());
      EXPECT_GT(f.responses.front(), last_head);
      last_head = f.responses.front();
      const Response& head = rs[f.responses.front()];
      uint64_t bytes = 0;
      for (size_t k = 0; k < f.responses.size(); ++k) {
        const int i = f.responses[k];
        ASSERT_GE(i, 0);
        ASSERT_LT(i, n);
        ++seen[i];
        if (k > 0) {
          EXPECT_GT(i, f.responses[k - 1]);
          EXPECT_TRUE(rs[i].error.empty());
          EXPECT_EQ(rs[i].type, head.type);
          EXPECT_EQ(rs[i].dtype, head.dtype);
          if (head.type == OpType::kAllreduce) {
            EXPECT_EQ(rs[i].op, head.op);
          }
        }
        bytes += FusionBytes(rs[i]);
      }
      if (f.responses.size() > 1) {
        EXPECT_TRUE(head.error.empty());
        EXPECT_TRUE(head.type == OpType::kAllreduce || head.type == OpType::kAllgather);
        EXPECT_LE(bytes, static_cast<uint64_t>(threshold));
        EXPECT_EQ(f.bytes, bytes);
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "response " << i;
  }
}

}  // namespace
}  // namespace korovod
