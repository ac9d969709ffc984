#include "common/status.h"

#include <gtest/gtest.h>

namespace korovod {
namespace {

TEST(StatusTest, WithContextPrefixesEveryTime) {
  const Status s = Unavailable("rank 1 (host h1) cannot reach rank 0");
  EXPECT_EQ(s.WithContext("rank 1").message(), "rank 1: rank 1 (host h1) cannot reach rank 0");
  EXPECT_EQ(s.WithContext("allreduce").WithContext("step 3").message(),
            "step 3: allreduce: rank 1 (host h1) cannot reach rank 0");
}

TEST(StatusTest, WithSubjectNamesTheRankOnce) {
  // Each layer of the sidecar adds its rank; the message says it once.
  const Status inner = Unavailable("rank 0 (127.0.0.1:53845): connection reset");
  const Status outer = inner.WithSubject("rank 0").WithSubject("rank 0");
  EXPECT_EQ(outer.code(), StatusCode::kUnavailable);
  EXPECT_EQ(outer.message(), "rank 0 (127.0.0.1:53845): connection reset");
  EXPECT_EQ(Internal("rank 2: arena full").WithSubject("rank 2").message(), "rank 2: arena full");
  EXPECT_EQ(Internal("rank 2").WithSubject("rank 2").message(), "rank 2");
}

TEST(StatusTest, WithSubjectPrefixesAnotherSubject) {
  // Another rank, or a number that only starts the same, is not this rank.
  EXPECT_EQ(Unavailable("rank 1 (127.0.0.1:1): gone").WithSubject("rank 0").message(),
            "rank 0: rank 1 (127.0.0.1:1): gone");
  EXPECT_EQ(Unavailable("rank 31 (127.0.0.1:1): gone").WithSubject("rank 3").message(),
            "rank 3: rank 31 (127.0.0.1:1): gone");
  EXPECT_EQ(Unavailable("no interface").WithSubject("rank 3").message(), "rank 3: no interface");
  EXPECT_TRUE(OkStatus().WithSubject("rank 3").ok());
}

}  // namespace
}  // namespace korovod
