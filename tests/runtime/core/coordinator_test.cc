// Coordinator: which tensors are ready, in which order, and the errors for disagreeing ranks.
#include "runtime/core/coordinator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace korovod {
namespace {

using namespace std::chrono_literals;

std::string Describe(int r) {
  return "rank " + std::to_string(r) + " (10.0.0." + std::to_string(r + 1) + ":5000)";
}

const Clock::time_point kT0 = Clock::time_point{} + 1000h;

Request Allreduce(const std::string& name, TensorShape shape = {4, 3}) {
  Request r;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = DataType::kFloat32;
  r.shape = std::move(shape);
  return r;
}

Request Typed(OpType type, const std::string& name, TensorShape shape) {
  Request r = Allreduce(name, std::move(shape));
  r.type = type;
  return r;
}

Request Join() {
  Request r;
  r.type = OpType::kJoin;
  r.name = "join";
  return r;
}

std::vector<std::string> Names(const std::vector<Response>& rs) {
  std::vector<std::string> out;
  for (const Response& r : rs) out.push_back(r.name);
  return out;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void Make(int size) { c_ = std::make_unique<Coordinator>(size, Describe, nullptr); }
  void In(int rank, std::vector<Request> reqs) { c_->Ingest(rank, reqs, kT0); }
  std::vector<Response> Take() { return c_->TakeReady(); }
  // Submits one request per rank, in rank order, and returns the single response.
  Response Decide(const std::vector<Request>& per_rank) {
    for (size_t r = 0; r < per_rank.size(); ++r) In(static_cast<int>(r), {per_rank[r]});
    auto out = Take();
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? Response{} : out[0];
  }
  std::unique_ptr<Coordinator> c_;
};

TEST_F(CoordinatorTest, ReadyOnlyOnceEveryRankReported) {
  Make(3);
  EXPECT_TRUE(c_->idle());
  In(0, {Allreduce("w")});
  In(1, {Allreduce("w")});
  EXPECT_TRUE(Take().empty());
  EXPECT_FALSE(c_->idle());
  EXPECT_TRUE(Take().empty());  // asking again changes nothing
  In(2, {Allreduce("w")});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "w");
  EXPECT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_TRUE(c_->idle());
  EXPECT_TRUE(Take().empty());  // taken once
}

TEST_F(CoordinatorTest, ResponseCarriesTheAgreedParameters) {
  Make(2);
  Request r = Allreduce("grad", {7, 2});
  r.dtype = DataType::kBFloat16;
  r.op = ReduceOp::kAverage;
  r.prescale = 0.5;
  r.postscale = 3;
  Response out = Decide({r, r});
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(out.type, OpType::kAllreduce);
  EXPECT_EQ(out.name, "grad");
  EXPECT_EQ(out.dtype, DataType::kBFloat16);
  EXPECT_EQ(out.shape, (TensorShape{7, 2}));
  EXPECT_EQ(out.op, ReduceOp::kAverage);
  EXPECT_EQ(out.prescale, 0.5);
  EXPECT_EQ(out.postscale, 3);
  EXPECT_TRUE(out.first_dims.empty());
}

TEST_F(CoordinatorTest, SingleRankSetIsReadyAtOnce) {
  Make(1);
  In(0, {Allreduce("a"), Allreduce("b")});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"a", "b"}));
}

TEST_F(CoordinatorTest, OrderedByFirstSubmission) {
  Make(2);
  In(0, {Allreduce("c"), Allreduce("a")});
  In(1, {Allreduce("b"), Allreduce("a"), Allreduce("c")});
  // c and a are complete; b waits for rank 0. Rank 0 submitted c before a.
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"c", "a"}));
  In(0, {Allreduce("d"), Allreduce("b")});
  In(1, {Allreduce("d")});
  // b was first submitted (by rank 1) before d.
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"b", "d"}));
}

TEST_F(CoordinatorTest, LaterCyclesKeepFirstSubmissionOrder) {
  Make(2);
  In(0, {Allreduce("z")});
  In(1, {Allreduce("y")});
  In(0, {Allreduce("x")});
  EXPECT_TRUE(Take().empty());
  In(1, {Allreduce("x"), Allreduce("z")});
  In(0, {Allreduce("y")});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"z", "y", "x"}));
}

TEST_F(CoordinatorTest, ShapeMismatchNamesTensorRanksAndValues) {
  Make(3);
  Response out =
      Decide({Allreduce("weights", {4, 3}), Allreduce("weights", {4, 4}), Allreduce("weights")});
  EXPECT_EQ(out.name, "weights");
  EXPECT_EQ(out.error,
            "tensor \"weights\": mismatched shape across ranks: rank 0 (10.0.0.1:5000), rank 2 "
            "(10.0.0.3:5000) [4, 3]; rank 1 (10.0.0.2:5000) [4, 4]");
}

TEST_F(CoordinatorTest, DtypeMismatch) {
  Make(2);
  Request b = Allreduce("t");
  b.dtype = DataType::kFloat64;
  Response out = Decide({Allreduce("t"), b});
  EXPECT_EQ(out.error,
            "tensor \"t\": mismatched dtype across ranks: rank 0 (10.0.0.1:5000) float32; rank 1 "
            "(10.0.0.2:5000) float64");
}

TEST_F(CoordinatorTest, OperationMismatch) {
  Make(2);
  Response out = Decide({Allreduce("t"), Typed(OpType::kBroadcast, "t", {4, 3})});
  EXPECT_EQ(out.error,
            "tensor \"t\": mismatched operation across ranks: rank 0 (10.0.0.1:5000) ALLREDUCE; "
            "rank 1 (10.0.0.2:5000) BROADCAST");
}

TEST_F(CoordinatorTest, ReduceOpMismatch) {
  Make(2);
  Request b = Allreduce("t");
  b.op = ReduceOp::kMax;
  Response out = Decide({Allreduce("t"), b});
  EXPECT_EQ(out.error,
            "tensor \"t\": mismatched reduce op across ranks: rank 0 (10.0.0.1:5000) sum; rank 1 "
            "(10.0.0.2:5000) max");
}

TEST_F(CoordinatorTest, ReduceScatterReduceOpMismatch) {
  Make(2);
  Request a = Typed(OpType::kReduceScatter, "rs", {4});
  Request b = a;
  b.op = ReduceOp::kMin;
  Response out = Decide({a, b});
  EXPECT_NE(out.error.find("mismatched reduce op"), std::string::npos) << out.error;
}

TEST_F(CoordinatorTest, ScalingMismatch) {
  Make(3);
  Request a = Allreduce("t");
  Request b = a;
  b.postscale = 0.5;
  Request c = a;
  c.prescale = 2;
  Response out = Decide({a, b, c});
  EXPECT_EQ(out.error,
            "tensor \"t\": mismatched scaling across ranks: rank 0 (10.0.0.1:5000) prescale 1 "
            "postscale 1; rank 1 (10.0.0.2:5000) prescale 1 postscale 0.5; rank 2 "
            "(10.0.0.3:5000) prescale 2 postscale 1");
}

TEST_F(CoordinatorTest, BroadcastRootMismatch) {
  Make(2);
  Request a = Typed(OpType::kBroadcast, "params", {10});
  Request b = a;
  b.root = 1;
  Response out = Decide({a, b});
  EXPECT_EQ(out.error,
            "tensor \"params\": mismatched broadcast root across ranks: rank 0 (10.0.0.1:5000) "
            "root 0; rank 1 (10.0.0.2:5000) root 1");
}

TEST_F(CoordinatorTest, BroadcastRootOutsideTheSet) {
  Make(2);
  Request a = Typed(OpType::kBroadcast, "params", {10});
  a.root = 2;
  Response out = Decide({a, a});
  EXPECT_NE(out.error.find("tensor \"params\""), std::string::npos) << out.error;
  EXPECT_NE(out.error.find("root 2"), std::string::npos) << out.error;
}

TEST_F(CoordinatorTest, BroadcastAgreeingOnRootSucceeds) {
  Make(3);
  Request a = Typed(OpType::kBroadcast, "params", {10});
  a.root = 2;
  Response out = Decide({a, a, a});
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(out.root, 2);
}

TEST_F(CoordinatorTest, RaggedAllgatherRankCountMismatch) {
  Make(2);
  Response out =
      Decide({Typed(OpType::kAllgather, "g", {2, 3}), Typed(OpType::kAllgather, "g", {5, 3, 1})});
  EXPECT_EQ(out.error,
            "tensor \"g\": mismatched rank (number of dimensions) across ranks: rank 0 "
            "(10.0.0.1:5000) [2, 3]; rank 1 (10.0.0.2:5000) [5, 3, 1]");
}

TEST_F(CoordinatorTest, AllgatherTrailingDimsMismatch) {
  Make(2);
  Response out =
      Decide({Typed(OpType::kAllgather, "g", {2, 3}), Typed(OpType::kAllgather, "g", {2, 4})});
  EXPECT_EQ(out.error,
            "tensor \"g\": mismatched shape (dimensions after the first) across ranks: rank 0 "
            "(10.0.0.1:5000) [3]; rank 1 (10.0.0.2:5000) [4]");
}

TEST_F(CoordinatorTest, AllgatherFirstDimsPerRank) {
  Make(3);
  Response out =
      Decide({Typed(OpType::kAllgather, "g", {2, 3, 2}), Typed(OpType::kAllgather, "g", {0, 3, 2}),
              Typed(OpType::kAllgather, "g", {5, 3, 2})});
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(out.first_dims, (std::vector<int64_t>{2, 0, 5}));
  EXPECT_EQ(out.shape, (TensorShape{3, 2}));
}

TEST_F(CoordinatorTest, AlltoallMayDifferInTheFirstDimension) {
  Make(2);
  Response out =
      Decide({Typed(OpType::kAlltoall, "a2a", {4, 8}), Typed(OpType::kAlltoall, "a2a", {6, 8})});
  EXPECT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(out.shape, (TensorShape{8}));
}

TEST_F(CoordinatorTest, AllreduceMayNotDifferInTheFirstDimension) {
  Make(2);
  Response out = Decide({Allreduce("t", {4, 8}), Allreduce("t", {6, 8})});
  EXPECT_NE(out.error.find("mismatched shape across ranks"), std::string::npos) << out.error;
}

TEST_F(CoordinatorTest, GroupingMismatch) {
  Make(2);
  Request a = Allreduce("t");
  a.group = "t+1";
  a.group_size = 1;
  Response out = Decide({a, Allreduce("t")});
  EXPECT_NE(out.error.find("mismatched grouping"), std::string::npos) << out.error;
  EXPECT_NE(out.error.find("rank 1 (10.0.0.2:5000) ungrouped"), std::string::npos) << out.error;
}

// An error is one response; other tensors of the cycle are unaffected.
TEST_F(CoordinatorTest, MismatchDoesNotAffectOtherTensors) {
  Make(2);
  In(0, {Allreduce("good"), Allreduce("bad", {1})});
  In(1, {Allreduce("good"), Allreduce("bad", {2})});
  auto out = Take();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "good");
  EXPECT_TRUE(out[0].error.empty());
  EXPECT_EQ(out[1].name, "bad");
  EXPECT_FALSE(out[1].error.empty());
}

TEST_F(CoordinatorTest, JoinedRankIsNotWaitedFor) {
  Make(3);
  In(2, {Join()});
  EXPECT_TRUE(Take().empty());
  EXPECT_EQ(c_->joined(), (std::vector<bool>{false, false, true}));
  In(0, {Allreduce("a")});
  EXPECT_TRUE(Take().empty());
  In(1, {Allreduce("a")});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"a"}));
}

TEST_F(CoordinatorTest, EntriesWaitingOnlyForARankThatJoinsBecomeReady) {
  Make(3);
  In(0, {Allreduce("a"), Allreduce("b")});
  In(1, {Allreduce("a"), Allreduce("b")});
  EXPECT_TRUE(Take().empty());
  In(2, {Join()});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"a", "b"}));
}

// As in Horovod, only allreduce runs while a rank has joined. The refusal comes as soon as one
// rank submits the op, and again for each later submission while the rank stays joined.
TEST_F(CoordinatorTest, AllgatherWhileARankJoinedFailsAtOnceNamingTensorAndRank) {
  Make(3);
  In(1, {Join()});
  In(0, {Typed(OpType::kAllgather, "g", {2, 3})});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "g");
  EXPECT_EQ(out[0].error,
            "tensor \"g\": allgather cannot run while rank 1 (10.0.0.2:5000) has joined (only "
            "allreduce runs with joined ranks, as in Horovod)");
  In(2, {Typed(OpType::kAllgather, "g", {4, 3})});
  out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].error.empty());
}

TEST_F(CoordinatorTest, AllgatherSubmittedBeforeJoiningKeepsTheRanksRows) {
  Make(3);
  In(1, {Typed(OpType::kAllgather, "g", {4, 3}), Join()});
  In(0, {Typed(OpType::kAllgather, "g", {2, 3})});
  In(2, {Typed(OpType::kAllgather, "g", {1, 3})});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_EQ(out[0].first_dims, (std::vector<int64_t>{2, 4, 1}));
}

TEST_F(CoordinatorTest, JoinCompletesWhenEveryRankJoined) {
  Make(3);
  In(1, {Join()});
  EXPECT_TRUE(Take().empty());
  In(0, {Allreduce("a"), Join()});
  In(2, {Allreduce("a")});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"a"}));
  In(2, {Join()});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, OpType::kJoin);
  EXPECT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_EQ(out[0].last_joined_rank, 2);
  EXPECT_EQ(c_->joined(), (std::vector<bool>{false, false, false}));
}

TEST_F(CoordinatorTest, JoinResponseIsLastEvenWithTensorsReadyInTheSameCycle) {
  Make(3);
  In(0, {Join()});
  In(1, {Join()});
  EXPECT_TRUE(Take().empty());
  In(2, {Allreduce("x"), Join()});
  // Rank 2's x waits for nobody: it comes before the join.
  auto out = Take();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].name, "x");
  EXPECT_EQ(out[1].type, OpType::kJoin);
}

// Every rank submits a tensor and joins in the same cycle (an async op, then join): the tensor has
// been submitted by every rank, so it runs, before the join completes.
TEST_F(CoordinatorTest, TensorSubmittedByEveryRankBeforeJoiningRunsBeforeTheJoin) {
  Make(2);
  In(0, {Allreduce("last_grad"), Join()});
  In(1, {Allreduce("last_grad"), Join()});
  auto out = Take();
  ASSERT_EQ(out.size(), 2u) << "got only: " << ::testing::PrintToString(Names(out));
  EXPECT_EQ(out[0].name, "last_grad");
  EXPECT_TRUE(out[0].error.empty()) << out[0].error;
  EXPECT_EQ(out[1].type, OpType::kJoin);
}

TEST_F(CoordinatorTest, LastJoinedRankIsTheOneThatJoinedLast) {
  Make(3);
  In(2, {Join()});
  EXPECT_TRUE(Take().empty());
  In(0, {Join()});
  EXPECT_TRUE(Take().empty());
  In(1, {Join()});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, OpType::kJoin);
  EXPECT_TRUE(out[0].error.empty());
  EXPECT_EQ(out[0].last_joined_rank, 1);
}

TEST_F(CoordinatorTest, AfterTheJoinRanksAreWaitedForAgain) {
  Make(2);
  In(0, {Join()});
  In(1, {Join()});
  ASSERT_EQ(Take().size(), 1u);
  In(0, {Allreduce("a")});
  EXPECT_TRUE(Take().empty());
  In(1, {Allreduce("a")});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"a"}));
  // A second join round reports its own last rank.
  In(1, {Join()});
  EXPECT_TRUE(Take().empty());
  In(0, {Join()});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].last_joined_rank, 0);
}

TEST_F(CoordinatorTest, BroadcastFromAJoinedRootFails) {
  Make(3);
  In(0, {Join()});
  Request b = Typed(OpType::kBroadcast, "params", {10});
  In(1, {b});
  In(2, {b});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "params");
  EXPECT_EQ(out[0].error,
            "tensor \"params\": broadcast cannot run while rank 0 (10.0.0.1:5000) has joined "
            "(only allreduce runs with joined ranks, as in Horovod)");
}

TEST_F(CoordinatorTest, BroadcastFromANonJoinedRootWhileAnotherRankJoinedFails) {
  Make(3);
  In(2, {Join()});
  Request b = Typed(OpType::kBroadcast, "params", {10});
  b.root = 1;
  In(0, {b});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].error.find("rank 2 (10.0.0.3:5000) has joined"), std::string::npos)
      << out[0].error;
}

TEST_F(CoordinatorTest, AlltoallWhileARankJoinedFails) {
  Make(3);
  In(1, {Join()});
  In(0, {Typed(OpType::kAlltoall, "a2a", {3, 2})});
  In(2, {Typed(OpType::kAlltoall, "a2a", {3, 2})});
  auto out = Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error,
            "tensor \"a2a\": alltoall cannot run while rank 1 (10.0.0.2:5000) has joined (only "
            "allreduce runs with joined ranks, as in Horovod)");
}

Request Grouped(const std::string& name, const std::string& group, int size) {
  Request r = Allreduce(name);
  r.group = group;
  r.group_size = size;
  return r;
}

TEST_F(CoordinatorTest, GroupIsReleasedOnlyWhenEveryMemberIsReady) {
  Make(2);
  In(0, {Grouped("a", "a+3", 3), Grouped("b", "a+3", 3), Grouped("c", "a+3", 3)});
  In(1, {Grouped("a", "a+3", 3), Grouped("b", "a+3", 3), Allreduce("solo")});
  EXPECT_TRUE(Take().empty());
  In(0, {Allreduce("solo")});
  // a and b are decided but held; the ungrouped tensor is not.
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"solo"}));
  EXPECT_TRUE(Take().empty());
  In(1, {Grouped("c", "a+3", 3)});
  auto out = Take();
  EXPECT_EQ(Names(out), (std::vector<std::string>{"a", "b", "c"}));
  for (const Response& r : out) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.group, "a+3");
    EXPECT_EQ(r.group_size, 3);
  }
  EXPECT_TRUE(Take().empty());
}

TEST_F(CoordinatorTest, TwoGroupsAreReleasedIndependently) {
  Make(2);
  In(0, {Grouped("a", "a+2", 2), Grouped("b", "a+2", 2), Grouped("x", "x+2", 2),
         Grouped("y", "x+2", 2)});
  In(1, {Grouped("x", "x+2", 2), Grouped("y", "x+2", 2), Grouped("a", "a+2", 2)});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"x", "y"}));
  In(1, {Grouped("b", "a+2", 2)});
  EXPECT_EQ(Names(Take()), (std::vector<std::string>{"a", "b"}));
}

TEST_F(CoordinatorTest, StallInspectorSeesPartiallySubmittedTensorsUntilTheyAreTaken) {
  StallInspector stall(10s, 0s, 0, 2);
  Coordinator c(2, Describe, &stall);
  c.Ingest(0, {Allreduce("lonely")}, kT0);
  EXPECT_TRUE(c.TakeReady().empty());
  auto finding = stall.Check(kT0 + 11s, Describe, c.joined());
  ASSERT_TRUE(finding.has_value());
  EXPECT_NE(finding->report.find("rank 1 (10.0.0.2:5000) has not submitted: lonely"),
            std::string::npos)
      << finding->report;
  c.Ingest(1, {Allreduce("lonely")}, kT0 + 12s);
  EXPECT_EQ(c.TakeReady().size(), 1u);
  EXPECT_FALSE(stall.Check(kT0 + 30s, Describe, c.joined()).has_value());
}

}  // namespace
}  // namespace korovod
