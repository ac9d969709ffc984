// Negotiation messages: every field survives a round trip, and no corrupt or truncated message
// crashes the decoder or makes it allocate what the message only claims to hold.
#include "runtime/core/negotiation_messages.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

// Largest single allocation made through operator new while tracking is on (this binary only).
namespace {
std::atomic<bool> g_track_allocations{false};
std::atomic<size_t> g_largest_allocation{0};

void* TrackedAlloc(size_t n) {
  if (g_track_allocations.load(std::memory_order_relaxed)) {
    size_t prev = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > prev && !g_largest_allocation.compare_exchange_weak(prev, n)) {
    }
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return TrackedAlloc(n); }
void* operator new[](size_t n) { return TrackedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace korovod {
namespace {

// Records the largest allocation made during its lifetime.
class AllocationWatch {
 public:
  AllocationWatch() {
    g_largest_allocation = 0;
    g_track_allocations = true;
  }
  ~AllocationWatch() { g_track_allocations = false; }
  size_t largest() const { return g_largest_allocation.load(); }
};

uint64_t Bits(double d) { return std::bit_cast<uint64_t>(d); }

// Decodes exactly `len` bytes from a heap block of that size, so that a read past the end is a
// heap overflow under AddressSanitizer.
StatusOr<std::vector<Request>> DecodeRequestsExact(const std::string& s, size_t len) {
  std::vector<std::byte> b(len);
  if (len > 0) std::memcpy(b.data(), s.data(), len);
  return DecodeRequests(b.data(), len);
}
StatusOr<ResponseList> DecodeResponsesExact(const std::string& s, size_t len) {
  std::vector<std::byte> b(len);
  if (len > 0) std::memcpy(b.data(), s.data(), len);
  return DecodeResponses(b.data(), len);
}
StatusOr<std::vector<Request>> DecodeRequestsOf(const std::string& s) {
  return DecodeRequestsExact(s, s.size());
}
StatusOr<ResponseList> DecodeResponsesOf(const std::string& s) {
  return DecodeResponsesExact(s, s.size());
}

void ExpectSameRequest(const Request& want, const Request& got) {
  SCOPED_TRACE("request \"" + want.name + "\"");
  EXPECT_EQ(want.type, got.type);
  EXPECT_EQ(want.name, got.name);
  EXPECT_EQ(want.dtype, got.dtype);
  EXPECT_EQ(want.shape, got.shape);
  EXPECT_EQ(want.op, got.op);
  EXPECT_EQ(Bits(want.prescale), Bits(got.prescale));
  EXPECT_EQ(Bits(want.postscale), Bits(got.postscale));
  EXPECT_EQ(want.root, got.root);
  EXPECT_EQ(want.group, got.group);
  EXPECT_EQ(want.group_size, got.group_size);
  EXPECT_EQ(want.set_ranks, got.set_ranks);
}

void ExpectSameResponse(const Response& want, const Response& got) {
  SCOPED_TRACE("response \"" + want.name + "\"");
  EXPECT_EQ(want.type, got.type);
  EXPECT_EQ(want.name, got.name);
  EXPECT_EQ(want.error, got.error);
  EXPECT_EQ(want.dtype, got.dtype);
  EXPECT_EQ(want.shape, got.shape);
  EXPECT_EQ(want.first_dims, got.first_dims);
  EXPECT_EQ(want.op, got.op);
  EXPECT_EQ(Bits(want.prescale), Bits(got.prescale));
  EXPECT_EQ(Bits(want.postscale), Bits(got.postscale));
  EXPECT_EQ(want.root, got.root);
  EXPECT_EQ(want.group, got.group);
  EXPECT_EQ(want.group_size, got.group_size);
  EXPECT_EQ(want.last_joined_rank, got.last_joined_rank);
  EXPECT_EQ(want.set_ranks, got.set_ranks);
}

void ExpectSameList(const ResponseList& want, const ResponseList& got) {
  EXPECT_EQ(want.shutdown, got.shutdown);
  EXPECT_EQ(want.shutdown_reason, got.shutdown_reason);
  ASSERT_EQ(want.tuning.has_value(), got.tuning.has_value());
  if (want.tuning) {
    EXPECT_EQ(want.tuning->fusion_threshold_bytes, got.tuning->fusion_threshold_bytes);
    EXPECT_EQ(Bits(want.tuning->cycle_time_ms), Bits(got.tuning->cycle_time_ms));
    EXPECT_EQ(want.tuning->small_allreduce_max_bytes, got.tuning->small_allreduce_max_bytes);
    EXPECT_EQ(want.tuning->tcp_stripe_min_bytes, got.tuning->tcp_stripe_min_bytes);
  }
  ASSERT_EQ(want.responses.size(), got.responses.size());
  for (size_t i = 0; i < want.responses.size(); ++i) {
    ExpectSameResponse(want.responses[i], got.responses[i]);
  }
}

const std::string kUnicodeName = "градиент/层.权重/🙂/ω";
const std::string kNameWithNul = std::string("a\0b\xff", 4);

// Requests with every field set to a non-default value, covering every enum value.
std::vector<Request> FullRequests() {
  std::vector<Request> out;
  Request r;
  r.type = OpType::kAllreduce;
  r.name = kUnicodeName;
  r.dtype = DataType::kBFloat16;
  r.shape = {3, 0, int64_t{1} << 58};  // large; its bytes still fit (what does not: limits test)
  r.op = ReduceOp::kProduct;
  r.prescale = -0.0;
  r.postscale = 1.0 / 3.0;
  r.root = std::numeric_limits<int32_t>::max();
  r.group = "group/" + kUnicodeName;
  r.group_size = 17;
  r.set_ranks = {0, 5, 2, std::numeric_limits<int32_t>::min()};
  out.push_back(r);

  Request nul;
  nul.type = OpType::kAddProcessSet;
  nul.name = kNameWithNul;
  nul.dtype = DataType::kFloat64;
  nul.prescale = std::numeric_limits<double>::denorm_min();
  nul.postscale = std::numeric_limits<double>::max();
  nul.root = -7;
  nul.set_ranks = {1, 3};
  out.push_back(nul);

  Request empty;  // every string and vector empty
  empty.type = OpType::kJoin;
  empty.name = "";
  out.push_back(empty);

  // Every op type, data type and reduce op value.
  for (uint8_t t = 0; t <= static_cast<uint8_t>(OpType::kRemoveProcessSet); ++t) {
    Request e;
    e.type = static_cast<OpType>(t);
    e.name = std::string("type.") + OpTypeName(e.type);
    e.shape = {t};
    out.push_back(e);
  }
  for (DataType d : kAllDataTypes) {
    Request e;
    e.name = std::string("dtype.") + DataTypeName(d);
    e.dtype = d;
    out.push_back(e);
  }
  for (ReduceOp o : kAllReduceOps) {
    Request e;
    e.name = std::string("op.") + ReduceOpName(o);
    e.op = o;
    out.push_back(e);
  }
  return out;
}

ResponseList FullResponses() {
  ResponseList list;
  list.shutdown = true;
  list.shutdown_reason = "stall: 1 tensor ... " + kUnicodeName + "\n  line two";
  TunableParams t;
  t.fusion_threshold_bytes = (int64_t{1} << 40) + 3;
  t.cycle_time_ms = 0.3125;
  t.small_allreduce_max_bytes = 12345;
  t.tcp_stripe_min_bytes = std::numeric_limits<int64_t>::max();
  list.tuning = t;

  Response r;
  r.type = OpType::kAllgather;
  r.name = kUnicodeName;
  r.error = "tensor \"" + kUnicodeName + "\": mismatched shape";
  r.dtype = DataType::kFloat16;
  r.shape = {7, 1};
  r.first_dims = {2, 0, 5, int64_t{1} << 40};
  r.op = ReduceOp::kMax;
  r.prescale = 0.5;
  r.postscale = -2.25;
  r.root = 3;
  r.group = "g";
  r.group_size = 2;
  r.last_joined_rank = 4;
  r.set_ranks = {0, 1, 2, 3, 4};
  list.responses.push_back(r);

  Response nul;
  nul.type = OpType::kJoin;
  nul.name = kNameWithNul;
  nul.error = kNameWithNul;
  nul.last_joined_rank = -1;
  list.responses.push_back(nul);

  list.responses.push_back(Response{});  // all defaults, empty name

  for (uint8_t ty = 0; ty <= static_cast<uint8_t>(OpType::kRemoveProcessSet); ++ty) {
    Response e;
    e.type = static_cast<OpType>(ty);
    e.name = std::string("type.") + OpTypeName(e.type);
    list.responses.push_back(e);
  }
  for (DataType d : kAllDataTypes) {
    Response e;
    e.name = std::string("dtype.") + DataTypeName(d);
    e.dtype = d;
    list.responses.push_back(e);
  }
  for (ReduceOp o : kAllReduceOps) {
    Response e;
    e.name = std::string("op.") + ReduceOpName(o);
    e.op = o;
    list.responses.push_back(e);
  }
  return list;
}

TEST(NegotiationMessagesTest, RequestsRoundTripEveryField) {
  const std::vector<Request> want = FullRequests();
  auto got = DecodeRequestsOf(EncodeRequests(want));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(want.size(), got->size());
  for (size_t i = 0; i < want.size(); ++i) ExpectSameRequest(want[i], (*got)[i]);
}

TEST(NegotiationMessagesTest, EmptyRequestListRoundTrips) {
  auto got = DecodeRequestsOf(EncodeRequests({}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->empty());
}

TEST(NegotiationMessagesTest, ResponsesRoundTripEveryField) {
  const ResponseList want = FullResponses();
  auto got = DecodeResponsesOf(EncodeResponses(want));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSameList(want, *got);
}

TEST(NegotiationMessagesTest, EmptyResponseListRoundTrips) {
  const ResponseList want;  // no responses, no shutdown, no tuning
  auto got = DecodeResponsesOf(EncodeResponses(want));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSameList(want, *got);
  EXPECT_FALSE(got->tuning.has_value());
  EXPECT_FALSE(got->shutdown);
}

TEST(NegotiationMessagesTest, ShutdownWithoutTuningAndTuningWithoutShutdownRoundTrip) {
  ResponseList a;
  a.shutdown = true;
  a.shutdown_reason = "bye";
  auto got_a = DecodeResponsesOf(EncodeResponses(a));
  ASSERT_TRUE(got_a.ok()) << got_a.status().ToString();
  ExpectSameList(a, *got_a);

  ResponseList b;
  b.tuning = TunableParams{};
  b.tuning->cycle_time_ms = 7.5;
  b.responses.push_back(Response{});
  auto got_b = DecodeResponsesOf(EncodeResponses(b));
  ASSERT_TRUE(got_b.ok()) << got_b.status().ToString();
  ExpectSameList(b, *got_b);
}

TEST(NegotiationMessagesTest, EveryTruncatedRequestEncodingIsAnError) {
  const std::string full = EncodeRequests(FullRequests());
  ASSERT_TRUE(DecodeRequestsOf(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    auto got = DecodeRequestsExact(full, len);
    ASSERT_FALSE(got.ok()) << "a prefix of " << len << " of " << full.size()
                           << " bytes decoded without error";
    EXPECT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
    EXPECT_NE(got.status().message().find("corrupt negotiation message"), std::string::npos)
        << got.status().ToString();
  }
}

TEST(NegotiationMessagesTest, EveryTruncatedResponseEncodingIsAnError) {
  const std::string full = EncodeResponses(FullResponses());
  ASSERT_TRUE(DecodeResponsesOf(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    auto got = DecodeResponsesExact(full, len);
    ASSERT_FALSE(got.ok()) << "a prefix of " << len << " of " << full.size()
                           << " bytes decoded without error";
    EXPECT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
    EXPECT_NE(got.status().message().find("corrupt negotiation message"), std::string::npos)
        << got.status().ToString();
  }
}

TEST(NegotiationMessagesTest, TrailingBytesAreAnError) {
  const std::string req = EncodeRequests(FullRequests()) + '\0';
  EXPECT_FALSE(DecodeRequestsOf(req).ok());
  const std::string resp = EncodeResponses(FullResponses()) + 'x';
  EXPECT_FALSE(DecodeResponsesOf(resp).ok());
}

TEST(NegotiationMessagesTest, RequestsAndResponsesAreNotMistakenForEachOther) {
  const std::string req = EncodeRequests(FullRequests());
  const std::string resp = EncodeResponses(FullResponses());
  EXPECT_FALSE(DecodeResponsesOf(req).ok());
  EXPECT_FALSE(DecodeRequestsOf(resp).ok());
  EXPECT_FALSE(DecodeResponsesOf(EncodeRequests({})).ok());
  EXPECT_FALSE(DecodeRequestsOf(EncodeResponses(ResponseList{})).ok());
}

// The first request's op type is the byte after the magic and the count.
TEST(NegotiationMessagesTest, OutOfRangeEnumIsAnError) {
  Request r;
  r.name = "x";
  std::string s = EncodeRequests({r});
  ASSERT_TRUE(DecodeRequestsOf(s).ok());
  ASSERT_EQ(static_cast<uint8_t>(s[8]), static_cast<uint8_t>(OpType::kAllreduce));
  s[8] = static_cast<char>(static_cast<uint8_t>(OpType::kRemoveProcessSet) + 1);
  EXPECT_FALSE(DecodeRequestsOf(s).ok());
  s[8] = static_cast<char>(0xff);
  EXPECT_FALSE(DecodeRequestsOf(s).ok());
}

void ExpectValidEnums(const Request& r) {
  EXPECT_LE(static_cast<uint8_t>(r.type), static_cast<uint8_t>(OpType::kRemoveProcessSet));
  EXPECT_LE(static_cast<uint8_t>(r.dtype), static_cast<uint8_t>(kLastDataType));
  EXPECT_LE(static_cast<uint8_t>(r.op), static_cast<uint8_t>(ReduceOp::kProduct));
}
void ExpectValidEnums(const Response& r) {
  EXPECT_LE(static_cast<uint8_t>(r.type), static_cast<uint8_t>(OpType::kRemoveProcessSet));
  EXPECT_LE(static_cast<uint8_t>(r.dtype), static_cast<uint8_t>(kLastDataType));
  EXPECT_LE(static_cast<uint8_t>(r.op), static_cast<uint8_t>(ReduceOp::kProduct));
}

// Flips 1-4 random bytes (and sometimes truncates or extends) of `valid`.
std::string Mutate(const std::string& valid, std::mt19937_64& rng) {
  std::string s = valid;
  const int flips = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < flips; ++i) {
    s[rng() % s.size()] = static_cast<char>(rng() & 0xff);
  }
  switch (rng() % 8) {
    case 0:
      s.resize(rng() % s.size());
      break;
    case 1:
      s.push_back(static_cast<char>(rng() & 0xff));
      break;
    default:
      break;
  }
  return s;
}

constexpr int kMutations = 20000;

TEST(NegotiationMessagesTest, RandomlyCorruptedRequestsDecodeOrFailCleanly) {
  const std::string valid = EncodeRequests(FullRequests());
  std::mt19937_64 rng(20240611);
  int decoded = 0;
  for (int i = 0; i < kMutations; ++i) {
    const std::string s = Mutate(valid, rng);
    auto got = DecodeRequestsOf(s);
    if (!got.ok()) {
      ASSERT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
      continue;
    }
    ++decoded;
    for (const Request& r : *got) ExpectValidEnums(r);
    // Whatever decoded encodes to a message that decodes to the same thing.
    const std::string again = EncodeRequests(*got);
    auto twice = DecodeRequestsOf(again);
    ASSERT_TRUE(twice.ok()) << "iteration " << i << ": " << twice.status().ToString();
    ASSERT_EQ(got->size(), twice->size());
    EXPECT_EQ(again, EncodeRequests(*twice)) << "iteration " << i;
    if (::testing::Test::HasFailure()) FAIL() << "iteration " << i;
  }
  // Flips inside names and doubles leave a valid message: the loop did exercise both outcomes.
  EXPECT_GT(decoded, 0);
  EXPECT_LT(decoded, kMutations);
}

TEST(NegotiationMessagesTest, RandomlyCorruptedResponsesDecodeOrFailCleanly) {
  const std::string valid = EncodeResponses(FullResponses());
  std::mt19937_64 rng(77);
  int decoded = 0;
  for (int i = 0; i < kMutations; ++i) {
    const std::string s = Mutate(valid, rng);
    auto got = DecodeResponsesOf(s);
    if (!got.ok()) {
      ASSERT_EQ(got.status().code(), StatusCode::kInternal) << got.status().ToString();
      continue;
    }
    ++decoded;
    for (const Response& r : got->responses) ExpectValidEnums(r);
    const std::string again = EncodeResponses(*got);
    auto twice = DecodeResponsesOf(again);
    ASSERT_TRUE(twice.ok()) << "iteration " << i << ": " << twice.status().ToString();
    EXPECT_EQ(again, EncodeResponses(*twice)) << "iteration " << i;
    if (::testing::Test::HasFailure()) FAIL() << "iteration " << i;
  }
  EXPECT_GT(decoded, 0);
  EXPECT_LT(decoded, kMutations);
}

// Little-endian field writers for hand-made messages.
void PutU32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void PutU8(std::string& s, uint8_t v) { s.push_back(static_cast<char>(v)); }

constexpr uint32_t kRequestMagic = 0x6b765251;
constexpr uint32_t kResponseMagic = 0x6b765253;

TEST(NegotiationMessagesTest, HugeDeclaredRequestLengthsAreRejectedWithoutAllocating) {
  ASSERT_TRUE(std::endian::native == std::endian::little);
  std::vector<std::string> messages;
  {  // 4 billion requests in 8 bytes
    std::string s;
    PutU32(s, kRequestMagic);
    PutU32(s, 0xffffffffu);
    messages.push_back(s);
  }
  {  // a name of 4 GiB
    std::string s;
    PutU32(s, kRequestMagic);
    PutU32(s, 1);
    PutU8(s, 0);
    PutU32(s, 0xfffffff0u);
    s += "abc";
    messages.push_back(s);
  }
  {  // a shape of 2^28 dimensions (2 GiB)
    std::string s;
    PutU32(s, kRequestMagic);
    PutU32(s, 1);
    PutU8(s, 0);
    PutU32(s, 1);
    s += "x";
    PutU8(s, 0);
    PutU32(s, 1u << 28);
    s += std::string(64, '\0');
    messages.push_back(s);
  }
  {  // a shape whose byte size wraps around 32 bits: 2^29 + 1 dimensions
    std::string s;
    PutU32(s, kRequestMagic);
    PutU32(s, 1);
    PutU8(s, 0);
    PutU32(s, 0);
    PutU8(s, 0);
    PutU32(s, (1u << 29) + 1);
    s += std::string(64, '\0');
    messages.push_back(s);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    AllocationWatch watch;
    auto got = DecodeRequestsOf(messages[i]);
    EXPECT_FALSE(got.ok()) << "message " << i;
    EXPECT_LT(watch.largest(), size_t{1} << 16) << "message " << i;
  }
}

TEST(NegotiationMessagesTest, HugeDeclaredResponseLengthsAreRejectedWithoutAllocating) {
  ASSERT_TRUE(std::endian::native == std::endian::little);
  std::vector<std::string> messages;
  {  // a shutdown reason of 4 GiB
    std::string s;
    PutU32(s, kResponseMagic);
    PutU8(s, 1);
    PutU32(s, 0xffffffffu);
    s += "stall";
    messages.push_back(s);
  }
  {  // 4 billion responses
    std::string s;
    PutU32(s, kResponseMagic);
    PutU8(s, 0);
    PutU32(s, 0);
    PutU8(s, 0);
    PutU32(s, 0xffffffffu);
    s += std::string(16, '\0');
    messages.push_back(s);
  }
  {  // one response whose first_dims claims 2^31 entries
    std::string s;
    PutU32(s, kResponseMagic);
    PutU8(s, 0);
    PutU32(s, 0);
    PutU8(s, 0);
    PutU32(s, 1);
    PutU8(s, static_cast<uint8_t>(OpType::kAllgather));
    PutU32(s, 1);
    s += "g";
    PutU32(s, 0);  // error
    PutU8(s, 0);   // dtype
    PutU32(s, 0);  // shape
    PutU32(s, 1u << 31);
    s += std::string(64, '\0');
    messages.push_back(s);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    AllocationWatch watch;
    auto got = DecodeResponsesOf(messages[i]);
    EXPECT_FALSE(got.ok()) << "message " << i;
    EXPECT_LT(watch.largest(), size_t{1} << 16) << "message " << i;
  }
}

// A count no larger than the message's byte length, but far more entries than the bytes can
// hold (an encoded request takes at least 43 bytes, a response 55): the decoder must not size
// its output by the claimed count. Allowed: a small multiple of the message itself.
constexpr size_t kCorruptMessageBytes = 64 << 10;
constexpr size_t kAllowedAmplification = 16;

TEST(NegotiationMessagesTest, ImplausibleRequestCountDoesNotAllocateBeyondTheMessage) {
  std::string s;
  PutU32(s, kRequestMagic);
  PutU32(s, static_cast<uint32_t>(kCorruptMessageBytes - 8));
  s.resize(kCorruptMessageBytes, '\0');
  AllocationWatch watch;
  auto got = DecodeRequestsOf(s);
  const size_t largest = watch.largest();
  EXPECT_FALSE(got.ok());
  EXPECT_LE(largest, kAllowedAmplification * kCorruptMessageBytes)
      << "decoding a " << kCorruptMessageBytes << "-byte message allocated " << largest
      << " bytes at once";
}

TEST(NegotiationMessagesTest, ImplausibleResponseCountDoesNotAllocateBeyondTheMessage) {
  std::string s;
  PutU32(s, kResponseMagic);
  PutU8(s, 0);
  PutU32(s, 0);
  PutU8(s, 0);
  PutU32(s, static_cast<uint32_t>(kCorruptMessageBytes - s.size() - 4));
  s.resize(kCorruptMessageBytes, '\0');
  AllocationWatch watch;
  auto got = DecodeResponsesOf(s);
  const size_t largest = watch.largest();
  EXPECT_FALSE(got.ok());
  EXPECT_LE(largest, kAllowedAmplification * kCorruptMessageBytes)
      << "decoding a " << kCorruptMessageBytes << "-byte message allocated " << largest
      << " bytes at once";
}

TEST(NegotiationMessagesTest, ByteSizeIsElementsTimesElementSize) {
  Response r;
  r.dtype = DataType::kFloat64;
  r.shape = {3, 5};
  EXPECT_EQ(r.ByteSize(), 3u * 5u * 8u);
  r.dtype = DataType::kFloat16;
  r.shape = {};
  EXPECT_EQ(r.ByteSize(), 2u);  // a scalar
  r.shape = {4, 0};
  EXPECT_EQ(r.ByteSize(), 0u);
}

TEST(NegotiationMessagesTest, SameAsComparesEveryNegotiatedField) {
  Request base;
  base.name = "t";
  base.shape = {2, 3};
  base.group = "g";
  base.group_size = 2;
  base.set_ranks = {0, 1};
  EXPECT_TRUE(base.SameAs(base));
  std::vector<Request> changed(11, base);
  changed[0].type = OpType::kAllgather;
  changed[1].name = "u";
  changed[2].dtype = DataType::kInt32;
  changed[3].shape = {2, 4};
  changed[4].op = ReduceOp::kMin;
  changed[5].prescale = 2;
  changed[6].postscale = 2;
  changed[7].root = 1;
  changed[8].group = "h";
  changed[9].group_size = 3;
  changed[10].set_ranks = {0, 2};
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_FALSE(base.SameAs(changed[i])) << "field " << i;
    EXPECT_FALSE(changed[i].SameAs(base)) << "field " << i;
  }
}

}  // namespace
}  // namespace korovod
