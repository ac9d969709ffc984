// StallInspector: the report text, when it is produced, and the shutdown decision. Explicit time
// points only: nothing here depends on the wall clock.
#include "runtime/core/stall_inspector.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace korovod {
namespace {

using namespace std::chrono_literals;

const Clock::time_point kT0 = Clock::time_point{} + 1000h;

std::string Describe(int r) {
  return "rank " + std::to_string(r) + " (host" + std::to_string(r) + ":7000)";
}

const std::string kAdvice =
    ". A rank that never submits a tensor the others do took another code path or ran out of data "
    "(use join).";

TEST(StallInspectorTest, ReportNamesMissingRanksTensorsAndAges) {
  StallInspector s(10s, 0s, /*set_id=*/3, /*set_size=*/4);
  s.Reported("grad.b", 0, kT0);
  s.Reported("grad.b", 1, kT0 + 1s);
  s.Reported("grad.a", 0, kT0 + 2s);
  s.Reported("done", 0, kT0);  // every rank submitted it (not yet resolved): not a stall
  s.Reported("done", 1, kT0);
  s.Reported("done", 2, kT0);
  s.Reported("done", 3, kT0);
  s.Reported("young", 2, kT0 + 5s);  // below the check time
  auto f = s.Check(kT0 + 12500ms, Describe, std::vector<bool>(4, false));
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(f->shutdown);
  EXPECT_EQ(f->report,
            "stall: 2 tensors submitted by some ranks of process set 3 have waited more than 10 s "
            "for the other ranks (oldest 12.5 s).\n"
            "  rank 1 (host1:7000) has not submitted: grad.a (10.5 s)\n"
            "  rank 2 (host2:7000) has not submitted: grad.a (10.5 s), grad.b (12.5 s)\n"
            "  rank 3 (host3:7000) has not submitted: grad.a (10.5 s), grad.b (12.5 s)\n"
            "  submitted by set ranks: 0, 1" +
                kAdvice);
}

TEST(StallInspectorTest, SingleTensorReportMatchesTheDocumentedExample) {
  StallInspector s(60s, 0s, 0, 3);
  s.Reported("lonely", 0, kT0);
  s.Reported("lonely", 1, kT0);
  auto f = s.Check(kT0 + 61s, Describe, std::vector<bool>(3, false));
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->report,
            "stall: 1 tensor submitted by some ranks of process set 0 has waited more than 60 s "
            "for the other ranks (oldest 61.0 s).\n"
            "  rank 2 (host2:7000) has not submitted: lonely (61.0 s)\n"
            "  submitted by set ranks: 0, 1" +
                kAdvice);
}

TEST(StallInspectorTest, NoReportBeforeTheCheckTime) {
  StallInspector s(10s, 0s, 0, 2);
  s.Reported("t", 0, kT0);
  const std::vector<bool> none(2, false);
  EXPECT_FALSE(s.Check(kT0, Describe, none).has_value());
  EXPECT_FALSE(s.Check(kT0 + 9999ms, Describe, none).has_value());
  EXPECT_TRUE(s.Check(kT0 + 10s, Describe, none).has_value());
}

TEST(StallInspectorTest, FirstSubmissionStartsTheClock) {
  StallInspector s(10s, 0s, 0, 3);
  s.Reported("t", 0, kT0);
  s.Reported("t", 1, kT0 + 8s);  // a later rank does not restart the age
  auto f = s.Check(kT0 + 10s, Describe, std::vector<bool>(3, false));
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(f->report.find("rank 2 (host2:7000) has not submitted: t (10.0 s)"), std::string::npos)
      << f->report;
}

TEST(StallInspectorTest, AtMostOneReportPerCheckInterval) {
  StallInspector s(10s, 0s, 0, 2);
  const std::vector<bool> none(2, false);
  s.Reported("t", 0, kT0);
  EXPECT_TRUE(s.Check(kT0 + 10s, Describe, none).has_value());
  EXPECT_FALSE(s.Check(kT0 + 10s, Describe, none).has_value());
  EXPECT_FALSE(s.Check(kT0 + 15s, Describe, none).has_value());
  s.Reported("u", 0, kT0 + 1s);  // another stalled tensor does not bypass the interval
  EXPECT_FALSE(s.Check(kT0 + 19999ms, Describe, none).has_value());
  auto f = s.Check(kT0 + 20s, Describe, none);
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(f->report.find("2 tensors"), std::string::npos) << f->report;
  EXPECT_FALSE(s.Check(kT0 + 25s, Describe, none).has_value());
  EXPECT_TRUE(s.Check(kT0 + 30s, Describe, none).has_value());
}

TEST(StallInspectorTest, ResolvedTensorIsNotReported) {
  StallInspector s(10s, 0s, 0, 2);
  s.Reported("t", 0, kT0);
  s.Resolved("t");
  EXPECT_FALSE(s.Check(kT0 + 100s, Describe, std::vector<bool>(2, false)).has_value());
}

TEST(StallInspectorTest, JoinedRanksAreNeverListedAsMissing) {
  StallInspector s(10s, 0s, 0, 4);
  s.Reported("t", 0, kT0);
  auto f = s.Check(kT0 + 11s, Describe, {false, true, false, true});
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(f->report.find("rank 2 (host2:7000) has not submitted: t"), std::string::npos)
      << f->report;
  EXPECT_EQ(f->report.find("rank 1 (host1:7000)"), std::string::npos) << f->report;
  EXPECT_EQ(f->report.find("rank 3 (host3:7000)"), std::string::npos) << f->report;
}

TEST(StallInspectorTest, TensorMissingOnlyOnJoinedRanksIsNoStall) {
  StallInspector s(10s, 20s, 0, 3);
  s.Reported("t", 0, kT0);
  s.Reported("t", 1, kT0);
  const std::vector<bool> rank2_joined = {false, false, true};
  EXPECT_FALSE(s.Check(kT0 + 11s, Describe, rank2_joined).has_value());
  EXPECT_FALSE(s.Check(kT0 + 60s, Describe, rank2_joined).has_value());  // nor a shutdown
}

TEST(StallInspectorTest, ShutdownAfterTheShutdownTime) {
  StallInspector s(10s, 30s, 0, 2);
  const std::vector<bool> none(2, false);
  s.Reported("t", 0, kT0);
  auto first = s.Check(kT0 + 10s, Describe, none);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(first->shutdown);
  auto second = s.Check(kT0 + 29999ms, Describe, none);
  ASSERT_TRUE(second.has_value());
  EXPECT_FALSE(second->shutdown);
  // Only just after the last report, but the shutdown time has come: reported at once.
  auto third = s.Check(kT0 + 30s, Describe, none);
  ASSERT_TRUE(third.has_value());
  EXPECT_TRUE(third->shutdown);
  EXPECT_NE(third->report.find("rank 1 (host1:7000) has not submitted: t (30.0 s)"),
            std::string::npos)
      << third->report;
}

TEST(StallInspectorTest, ShutdownWithoutCheckReportsOnlyAtTheShutdownTime) {
  StallInspector s(0s, 30s, 5, 2);
  const std::vector<bool> none(2, false);
  s.Reported("t", 1, kT0);
  EXPECT_FALSE(s.Check(kT0 + 10s, Describe, none).has_value());
  EXPECT_FALSE(s.Check(kT0 + 29s, Describe, none).has_value());
  auto f = s.Check(kT0 + 30s, Describe, none);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->shutdown);
  EXPECT_EQ(f->report,
            "stall: 1 tensor submitted by some ranks of process set 5 has waited more than 30 s "
            "for the other ranks (oldest 30.0 s).\n"
            "  rank 0 (host0:7000) has not submitted: t (30.0 s)\n"
            "  submitted by set ranks: 1" +
                kAdvice);
}

TEST(StallInspectorTest, DisabledWhenBothTimesAreZero) {
  StallInspector s(0s, 0s, 0, 2);
  s.Reported("t", 0, kT0);
  EXPECT_FALSE(s.Check(kT0 + 1h, Describe, std::vector<bool>(2, false)).has_value());
  EXPECT_FALSE(s.Check(kT0 + 1000h, Describe, std::vector<bool>(2, false)).has_value());
}

// A check time far beyond any run ("never", e.g. KOROVOD_STALL_CHECK_TIME_SECONDS=1e10, which
// the configuration accepts) must not report a tensor that waited one second.
TEST(StallInspectorTest, VeryLongCheckTimeDoesNotReportEarly) {
  const std::chrono::milliseconds ten_billion_seconds(int64_t{10'000'000'000'000});
  StallInspector s(ten_billion_seconds, 0s, 0, 2);
  s.Reported("t", 0, kT0);
  auto f = s.Check(kT0 + 1s, Describe, std::vector<bool>(2, false));
  EXPECT_FALSE(f.has_value()) << f->report;
}

TEST(StallInspectorTest, VeryLongShutdownTimeDoesNotShutDownEarly) {
  const std::chrono::milliseconds ten_billion_seconds(int64_t{10'000'000'000'000});
  StallInspector s(60s, ten_billion_seconds, 0, 2);
  s.Reported("t", 0, kT0);
  auto f = s.Check(kT0 + 61s, Describe, std::vector<bool>(2, false));
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(f->shutdown) << f->report;
}

}  // namespace
}  // namespace korovod
