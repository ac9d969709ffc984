// ResponseCache: lookups, LRU eviction, bit reuse, and that identical operation sequences give
// identical bits on every rank.
#include "runtime/core/response_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace korovod {
namespace {

Request Req(const std::string& name, TensorShape shape = {4, 3}) {
  Request r;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = DataType::kFloat32;
  r.shape = std::move(shape);
  r.op = ReduceOp::kSum;
  return r;
}

Response Resp(const Request& r) {
  Response out;
  out.type = r.type;
  out.name = r.name;
  out.dtype = r.dtype;
  out.shape = r.shape;
  out.op = r.op;
  out.prescale = r.prescale;
  out.postscale = r.postscale;
  out.root = r.root;
  out.group = r.group;
  out.group_size = r.group_size;
  return out;
}

// Puts `name` with its default request; returns the evicted bit.
int PutName(ResponseCache& c, const std::string& name) {
  const Request r = Req(name);
  return c.Put(Resp(r), r);
}

// The bit holding `name`, or -1 when it is not cached.
int BitOf(const ResponseCache& c, const std::string& name) {
  int bit = -1;
  return c.Find(Req(name), &bit) == ResponseCache::Lookup::kMiss ? -1 : bit;
}

TEST(ResponseCacheTest, EmptyCacheMisses) {
  ResponseCache c(4);
  int bit = 123;
  EXPECT_EQ(c.Find(Req("a"), &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(c.size(), 0);
  EXPECT_EQ(c.capacity(), 4);
}

TEST(ResponseCacheTest, SameRequestHitsWithItsResponse) {
  ResponseCache c(4);
  Request a = Req("layer1.weight", {128, 64});
  a.prescale = 0.5;
  Response ra = Resp(a);
  EXPECT_EQ(c.Put(ra, a), -1);
  EXPECT_EQ(PutName(c, "other"), -1);
  int bit = -1;
  ASSERT_EQ(c.Find(a, &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, 0);
  EXPECT_TRUE(c.occupied(bit));
  EXPECT_EQ(c.response(bit).name, "layer1.weight");
  EXPECT_EQ(c.response(bit).shape, (TensorShape{128, 64}));
  EXPECT_EQ(c.response(bit).prescale, 0.5);
  EXPECT_EQ(c.size(), 2);
  EXPECT_EQ(BitOf(c, "other"), 1);
}

TEST(ResponseCacheTest, UnknownNameMissesInAFilledCache) {
  ResponseCache c(4);
  PutName(c, "a");
  PutName(c, "b");
  int bit = -1;
  EXPECT_EQ(c.Find(Req("c"), &bit), ResponseCache::Lookup::kMiss);
}

// Each change of a negotiated parameter makes the cached name stale, and says which bit.
TEST(ResponseCacheTest, ChangedParametersAreInvalid) {
  Request base = Req("t", {8, 2});
  base.type = OpType::kBroadcast;
  base.root = 1;
  base.group = "";
  struct Change {
    const char* what;
    void (*apply)(Request&);
  };
  const Change changes[] = {
      {"shape",
       [](Request& r) {
         r.shape = {8, 3};
       }},
      {"rank of shape",
       [](Request& r) {
         r.shape = {8, 2, 1};
       }},
      {"dtype", [](Request& r) { r.dtype = DataType::kFloat16; }},
      {"operation", [](Request& r) { r.type = OpType::kAllreduce; }},
      {"reduce op", [](Request& r) { r.op = ReduceOp::kMax; }},
      {"prescale", [](Request& r) { r.prescale = 0.25; }},
      {"postscale", [](Request& r) { r.postscale = 4.0; }},
      {"root", [](Request& r) { r.root = 0; }},
      {"group", [](Request& r) { r.group = "g+2"; }},
      {"group size", [](Request& r) { r.group_size = 2; }},
  };
  for (const Change& ch : changes) {
    SCOPED_TRACE(ch.what);
    ResponseCache c(4);
    PutName(c, "first");
    ASSERT_EQ(c.Put(Resp(base), base), -1);
    Request changed = base;
    ch.apply(changed);
    int bit = -1;
    EXPECT_EQ(c.Find(changed, &bit), ResponseCache::Lookup::kInvalid);
    EXPECT_EQ(bit, 1);
    // The original still hits.
    EXPECT_EQ(c.Find(base, &bit), ResponseCache::Lookup::kHit);
  }
}

// Each rank compares against its own request, not the shared response (allgather: the first
// dimension is rank-specific).
TEST(ResponseCacheTest, HitsCompareWithThisRanksOwnRequest) {
  ResponseCache c(2);
  Request mine = Req("gathered", {5, 3});
  mine.type = OpType::kAllgather;
  Response shared = Resp(mine);
  shared.shape = {3};
  shared.first_dims = {2, 5};
  c.Put(shared, mine);
  int bit = -1;
  EXPECT_EQ(c.Find(mine, &bit), ResponseCache::Lookup::kHit);
  Request other_rank = mine;
  other_rank.shape = {2, 3};
  EXPECT_EQ(c.Find(other_rank, &bit), ResponseCache::Lookup::kInvalid);
}

TEST(ResponseCacheTest, PutOfACachedNameReplacesItInPlace) {
  ResponseCache c(4);
  PutName(c, "a");
  PutName(c, "b");
  Request b2 = Req("b", {1});
  EXPECT_EQ(c.Put(Resp(b2), b2), -1);
  EXPECT_EQ(c.size(), 2);
  int bit = -1;
  EXPECT_EQ(c.Find(b2, &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, 1);
  EXPECT_EQ(c.response(bit).shape, (TensorShape{1}));
  EXPECT_EQ(c.Find(Req("b"), &bit), ResponseCache::Lookup::kInvalid);
}

TEST(ResponseCacheTest, FullCacheEvictsTheLeastRecentlyUsedBit) {
  ResponseCache c(3);
  EXPECT_EQ(PutName(c, "a"), -1);
  EXPECT_EQ(PutName(c, "b"), -1);
  EXPECT_EQ(PutName(c, "c"), -1);
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(PutName(c, "d"), 0);  // "a" was the least recently used
  EXPECT_EQ(BitOf(c, "a"), -1);
  EXPECT_EQ(BitOf(c, "d"), 0);
  EXPECT_EQ(c.response(0).name, "d");
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(PutName(c, "e"), 1);  // then "b"
  EXPECT_EQ(BitOf(c, "b"), -1);
  EXPECT_EQ(BitOf(c, "e"), 1);
}

TEST(ResponseCacheTest, TouchMakesABitMostRecentlyUsed) {
  ResponseCache c(3);
  PutName(c, "a");
  PutName(c, "b");
  PutName(c, "c");
  c.Touch(0);                     // a
  EXPECT_EQ(PutName(c, "d"), 1);  // b is now the oldest
  EXPECT_EQ(BitOf(c, "a"), 0);
  c.Touch(2);                     // c
  c.Touch(0);                     // a
  EXPECT_EQ(PutName(c, "e"), 1);  // d (bit 1) is the oldest
  EXPECT_EQ(PutName(c, "f"), 2);  // then c
  EXPECT_EQ(BitOf(c, "a"), 0);
}

TEST(ResponseCacheTest, ReplacingANameCountsAsUse) {
  ResponseCache c(3);
  PutName(c, "a");
  PutName(c, "b");
  PutName(c, "c");
  const Request a2 = Req("a", {9});
  EXPECT_EQ(c.Put(Resp(a2), a2), -1);
  EXPECT_EQ(PutName(c, "d"), 1);  // b, not a
}

TEST(ResponseCacheTest, EraseFreesTheBitAndForgetsTheName) {
  ResponseCache c(4);
  PutName(c, "a");
  PutName(c, "b");
  c.Erase(0);
  EXPECT_FALSE(c.occupied(0));
  EXPECT_TRUE(c.occupied(1));
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(BitOf(c, "a"), -1);
  c.Erase(0);  // erasing a free bit changes nothing
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(BitOf(c, "b"), 1);
}

TEST(ResponseCacheTest, ErasedBitsAreReusedLowestFirst) {
  ResponseCache c(5);
  for (const char* n : {"a", "b", "c", "d", "e"}) PutName(c, n);
  c.Erase(3);
  c.Erase(0);
  c.Erase(4);
  EXPECT_EQ(PutName(c, "x"), -1);
  EXPECT_EQ(BitOf(c, "x"), 0);
  EXPECT_EQ(PutName(c, "y"), -1);
  EXPECT_EQ(BitOf(c, "y"), 3);
  EXPECT_EQ(PutName(c, "z"), -1);
  EXPECT_EQ(BitOf(c, "z"), 4);
  EXPECT_EQ(c.size(), 5);
  // Full again: now the least recently used (b, bit 1) goes.
  EXPECT_EQ(PutName(c, "w"), 1);
}

TEST(ResponseCacheTest, ErasedBitIsReusedBeforeANeverUsedOne) {
  ResponseCache c(8);
  PutName(c, "a");
  PutName(c, "b");
  PutName(c, "c");
  c.Erase(1);
  PutName(c, "d");
  EXPECT_EQ(BitOf(c, "d"), 1);
  PutName(c, "e");
  EXPECT_EQ(BitOf(c, "e"), 3);
}

TEST(ResponseCacheTest, ErasedBitLeavesTheLruOrder) {
  ResponseCache c(3);
  PutName(c, "a");
  PutName(c, "b");
  PutName(c, "c");
  c.Erase(0);                      // a, the oldest
  EXPECT_EQ(PutName(c, "d"), -1);  // takes the free bit 0, evicts nothing
  EXPECT_EQ(BitOf(c, "d"), 0);
  EXPECT_EQ(PutName(c, "e"), 1);  // b is the oldest now, d the newest
  EXPECT_EQ(PutName(c, "f"), 2);
  EXPECT_EQ(PutName(c, "g"), 0);
}

TEST(ResponseCacheTest, CapacityZeroNeverStores) {
  ResponseCache c(0);
  EXPECT_EQ(PutName(c, "a"), -1);
  EXPECT_EQ(PutName(c, "a"), -1);
  EXPECT_EQ(c.size(), 0);
  int bit = -1;
  EXPECT_EQ(c.Find(Req("a"), &bit), ResponseCache::Lookup::kMiss);
}

TEST(ResponseCacheTest, CapacityOneKeepsOnlyTheNewest) {
  ResponseCache c(1);
  EXPECT_EQ(PutName(c, "a"), -1);
  EXPECT_EQ(PutName(c, "b"), 0);
  EXPECT_EQ(BitOf(c, "a"), -1);
  EXPECT_EQ(BitOf(c, "b"), 0);
  EXPECT_EQ(c.size(), 1);
}

// Two ranks' caches see the same Put/Touch/Erase sequence (bits chosen from the shared state),
// each with its own request per tensor; every bit must mean the same tensor on both.
TEST(ResponseCacheTest, SameSequenceGivesSameBitsOnEveryRank) {
  constexpr int kCapacity = 16;
  constexpr int kNames = 40;
  ResponseCache rank0(kCapacity), rank1(kCapacity);
  std::mt19937 rng(4242);
  auto mine = [](int rank, const std::string& name) {
    Request r = Req(name, {rank + 1, 3});
    r.type = OpType::kAllgather;
    return r;
  };
  int evictions = 0, erases = 0, touches = 0;
  for (int step = 0; step < 5000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int action = static_cast<int>(rng() % 10);
    if (action < 6) {
      const std::string name = "t" + std::to_string(rng() % kNames);
      Response shared = Resp(mine(0, name));
      shared.shape = {3};
      shared.first_dims = {1, 2};
      const int e0 = rank0.Put(shared, mine(0, name));
      const int e1 = rank1.Put(shared, mine(1, name));
      ASSERT_EQ(e0, e1);
      evictions += e0 >= 0;
    } else {
      std::vector<int> occupied;
      for (int b = 0; b < kCapacity; ++b) {
        ASSERT_EQ(rank0.occupied(b), rank1.occupied(b)) << "bit " << b;
        if (rank0.occupied(b)) occupied.push_back(b);
      }
      if (occupied.empty()) continue;
      const int b = occupied[rng() % occupied.size()];
      if (action < 9) {
        rank0.Touch(b);
        rank1.Touch(b);
        ++touches;
      } else {
        rank0.Erase(b);
        rank1.Erase(b);
        ++erases;
      }
    }
    ASSERT_EQ(rank0.size(), rank1.size());
    for (int b = 0; b < kCapacity; ++b) {
      ASSERT_EQ(rank0.occupied(b), rank1.occupied(b)) << "bit " << b;
      if (!rank0.occupied(b)) continue;
      const std::string& name = rank0.response(b).name;
      ASSERT_EQ(name, rank1.response(b).name) << "bit " << b;
      int b0 = -1, b1 = -1;
      ASSERT_EQ(rank0.Find(mine(0, name), &b0), ResponseCache::Lookup::kHit);
      ASSERT_EQ(rank1.Find(mine(1, name), &b1), ResponseCache::Lookup::kHit);
      ASSERT_EQ(b0, b);
      ASSERT_EQ(b1, b);
    }
  }
  // The sequence exercised eviction, erasure and touching.
  EXPECT_GT(evictions, 0);
  EXPECT_GT(erases, 0);
  EXPECT_GT(touches, 0);
}

}  // namespace
}  // namespace korovod
