// TokenBucket with an injected clock: the waits it hands out, never how long anything took.
#include "operator/kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace korovod::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

class FakeClock {
 public:
  TokenBucket::Clock clock() {
    return [this] { return now_; };
  }
  void Advance(nanoseconds d) { now_ += d; }

 private:
  std::chrono::steady_clock::time_point now_{};
};

TEST(TokenBucketTest, BurstIsFreeThenOneTokenPerInterval) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/3, clock.clock());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(), nanoseconds(0)) << i;
  // Empty: the 4th token refills in 100 ms, the 5th in 200 ms (reserved in order).
  EXPECT_EQ(bucket.Reserve(), milliseconds(100));
  EXPECT_EQ(bucket.Reserve(), milliseconds(200));
}

TEST(TokenBucketTest, RefillsAtQpsUpToBurst) {
  FakeClock clock;
  TokenBucket bucket(10, 2, clock.clock());
  EXPECT_EQ(bucket.Reserve(), nanoseconds(0));
  EXPECT_EQ(bucket.Reserve(), nanoseconds(0));
  clock.Advance(milliseconds(100));  // one token back
  EXPECT_EQ(bucket.Reserve(), nanoseconds(0));
  EXPECT_EQ(bucket.Reserve(), milliseconds(100));
  clock.Advance(std::chrono::seconds(60));  // a long idle refills to burst, not beyond
  EXPECT_EQ(bucket.Reserve(), nanoseconds(0));
  EXPECT_EQ(bucket.Reserve(), nanoseconds(0));
  EXPECT_EQ(bucket.Reserve(), milliseconds(100));
}

TEST(TokenBucketTest, OwedTokensAreRepaidBeforeNewOnes) {
  FakeClock clock;
  TokenBucket bucket(50, 1, clock.clock());
  EXPECT_EQ(bucket.Reserve(), nanoseconds(0));
  EXPECT_EQ(bucket.Reserve(), milliseconds(20));
  EXPECT_EQ(bucket.Reserve(), milliseconds(40));
  clock.Advance(milliseconds(40));  // both owed tokens refilled, none spare
  EXPECT_EQ(bucket.Reserve(), milliseconds(20));
}

TEST(TokenBucketTest, AThousandCreatesAtTheOperatorDefaultsFitInAMinute) {
  // --kube-api-qps 50 --kube-api-burst 100 (operator_options.h): 1000 requests issued at once
  // are all allowed to go by (1000 - 100) / 50 = 18 s.
  FakeClock clock;
  TokenBucket bucket(50, 100, clock.clock());
  nanoseconds last{0};
  for (int i = 0; i < 1000; ++i) last = bucket.Reserve();
  EXPECT_EQ(last, std::chrono::seconds(18));
}

TEST(TokenBucketTest, ZeroQpsDisablesTheLimit) {
  FakeClock clock;
  TokenBucket bucket(0, 1, clock.clock());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(bucket.Reserve(), nanoseconds(0));
}

}  // namespace
}  // namespace korovod::kube
