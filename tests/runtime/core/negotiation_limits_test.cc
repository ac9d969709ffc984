// What a peer may declare in a negotiation message (negotiation_messages.h): every cap refused
// at decode before allocating, shapes whose sizes overflow 64 bits refused, responses checked
// against the set, and admission refusing the same of this rank's own ops.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/core/coordinator.h"
#include "runtime/core/negotiation_messages.h"

namespace korovod {
namespace {

StatusOr<std::vector<Request>> Decode(const std::string& s) {
  return DecodeRequests(reinterpret_cast<const std::byte*>(s.data()), s.size());
}

StatusOr<ResponseList> DecodeR(const std::string& s) {
  return DecodeResponses(reinterpret_cast<const std::byte*>(s.data()), s.size());
}

Request Req(const std::string& name, TensorShape shape) {
  Request r;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

TEST(NegotiationLimitsTest, EncodedRequestBytesIsExact) {
  Request r = Req("grad.w", {3, 4, 5});
  r.group = "grad.w+2";
  r.set_ranks = {0, 1, 2};
  EXPECT_EQ(EncodeRequests({r}).size(), 8 + EncodedRequestBytes(r));
  EXPECT_EQ(EncodeRequests({r, r}).size(), 8 + 2 * EncodedRequestBytes(r));
}

TEST(NegotiationLimitsTest, LongNameRefused) {
  EXPECT_TRUE(Decode(EncodeRequests({Req(std::string(kMaxTensorNameBytes, 'n'), {1})})).ok());
  auto bad = Decode(EncodeRequests({Req(std::string(kMaxTensorNameBytes + 1, 'n'), {1})}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("over its limit"), std::string::npos);
  EXPECT_FALSE(CheckRequestLimits(Req(std::string(kMaxTensorNameBytes + 1, 'n'), {1})).ok());
}

TEST(NegotiationLimitsTest, TooManyDimsRefused) {
  EXPECT_TRUE(Decode(EncodeRequests({Req("t", TensorShape(kMaxTensorDims, 1))})).ok());
  EXPECT_FALSE(Decode(EncodeRequests({Req("t", TensorShape(kMaxTensorDims + 1, 1))})).ok());
}

TEST(NegotiationLimitsTest, OverflowingShapesRefused) {
  // 2^32 x 2^32 elements: NumElements would wrap to 0 unchecked.
  auto r = Decode(EncodeRequests({Req("t", {int64_t{1} << 32, int64_t{1} << 32})}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overflowing shape [4294967296, 4294967296]"),
            std::string::npos)
      << r.status().message();
  // Elements fit, float32 bytes do not.
  EXPECT_FALSE(Decode(EncodeRequests({Req("t", {int64_t{1} << 62})})).ok());
  EXPECT_FALSE(Decode(EncodeRequests({Req("t", {-1, 4})})).ok());
  EXPECT_FALSE(CheckRequestLimits(Req("t", {int64_t{1} << 62})).ok());
}

TEST(NegotiationLimitsTest, AllgatherRowsMustFitTogether) {
  ResponseList list;
  Response r;
  r.type = OpType::kAllgather;
  r.name = "g";
  r.dtype = DataType::kUint8;
  r.shape = {1};
  r.first_dims = {int64_t{1} << 62, int64_t{1} << 62};  // each fits, their sum does not
  list.responses.push_back(r);
  EXPECT_FALSE(DecodeR(EncodeResponses(list)).ok());
  list.responses[0].first_dims = {4, -1};
  EXPECT_FALSE(DecodeR(EncodeResponses(list)).ok());
  list.responses[0].first_dims = {4, 5};
  EXPECT_TRUE(DecodeR(EncodeResponses(list)).ok());
}

TEST(NegotiationLimitsTest, ResponsesCheckedAgainstTheSet) {
  ResponseList list;
  Response r;
  r.name = "t";
  r.shape = {2};
  r.absent = {3};
  list.responses.push_back(r);
  EXPECT_TRUE(CheckResponsesForSet(list, 4).ok());
  Status s = CheckResponsesForSet(list, 3);
  EXPECT_NE(s.message().find("absent rank 3 is outside a set of 3"), std::string::npos);
  list.responses[0].absent.clear();
  list.responses[0].type = OpType::kAllgather;
  list.responses[0].first_dims = {1, 2};
  EXPECT_FALSE(CheckResponsesForSet(list, 3).ok());  // rows of 2 ranks in a set of 3
  EXPECT_TRUE(CheckResponsesForSet(list, 2).ok());
  list.responses[0].type = OpType::kBroadcast;
  list.responses[0].root = 2;
  EXPECT_FALSE(CheckResponsesForSet(list, 2).ok());
}

TEST(NegotiationLimitsTest, DeclaredCountAboveTheCapRefusedBeforeAllocating) {
  // A header declaring 2^18 + 1 requests, with enough bytes behind it that only the cap refuses.
  std::string msg = EncodeRequests({});
  const uint32_t n = kMaxRequestsPerMessage + 1;
  std::memcpy(msg.data() + 4, &n, 4);
  msg.append(size_t{n} * 44, '\0');
  auto r = Decode(msg);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad request count"), std::string::npos);
}

TEST(NegotiationLimitsTest, CoordinatorRefusesAllgatherRowsThatOverflowTogether) {
  Coordinator c(2, [](int r) { return "rank " + std::to_string(r); }, nullptr);
  Request a = Req("rows", {int64_t{1} << 61, 1});
  a.type = OpType::kAllgather;
  a.dtype = DataType::kUint8;
  c.Ingest(0, {a}, Clock::now());
  c.Ingest(1, {a}, Clock::now());
  c.Ingest(1, {}, Clock::now());
  a.shape = {int64_t{1} << 62, 1};
  Coordinator c2(2, [](int r) { return "rank " + std::to_string(r); }, nullptr);
  c2.Ingest(0, {a}, Clock::now());
  c2.Ingest(1, {a}, Clock::now());
  auto ok = c.TakeReady();
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_TRUE(ok[0].error.empty()) << ok[0].error;
  auto bad = c2.TakeReady();
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].error.find("rows together"), std::string::npos) << bad[0].error;
  ResponseList list;
  list.responses = bad;
  EXPECT_TRUE(DecodeR(EncodeResponses(list)).ok());  // the error travels to the other ranks
}

}  // namespace
}  // namespace korovod
