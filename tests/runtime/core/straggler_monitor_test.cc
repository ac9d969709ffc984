// StragglerMonitor: who waited for whom, per step, from synthetic exchanges at known times.
#include "runtime/core/straggler_monitor.h"

#include <gtest/gtest.h>

namespace korovod {
namespace {

using namespace std::chrono_literals;
using View = StragglerMonitor::RankView;

constexpr View kIdle{false, false, false};
constexpr View kHolding{true, false, true};  // submitted a tensor another lacks
constexpr View kDone{true, false, false};    // in flight, nothing partial
constexpr View kLacking{true, true, false};  // in flight, lacks a tensor others have

// One step of 3 ranks in which rank 2 is `late` ms behind: either it has nothing in flight yet
// (input) or it has started but lacks tensors (compute).
void Step(StragglerMonitor& m, Clock::time_point& t, bool input, int late_ms) {
  m.Observe(t, {kHolding, kHolding, input ? kIdle : kLacking});
  if (!input) m.Observe(t, {kHolding, kHolding, kLacking});
  t += std::chrono::milliseconds(late_ms);
  m.Observe(t, {kDone, kDone, kDone});
  t += 1ms;
  m.Observe(t, {kIdle, kIdle, kIdle});
  t += 10ms;
}

std::string Describe(int r) { return "rank " + std::to_string(r) + " (h:1)"; }

TEST(StragglerMonitor, AnInputBoundRankIsNamed) {
  StragglerMonitor m(3, 5ms);
  Clock::time_point t{};
  for (int i = 0; i < 10; ++i) Step(m, t, /*input=*/true, 40);
  EXPECT_EQ(m.steps(), 10u);
  EXPECT_EQ(m.totals(2).last_steps, 10u);
  EXPECT_NEAR(m.totals(2).others_waited_for_me_s, 0.4, 1e-9);
  EXPECT_NEAR(m.totals(2).waited_before_first_s, 0.4, 1e-9);
  EXPECT_NEAR(m.totals(0).waited_for_others_s, 0.4, 1e-9);
  EXPECT_NEAR(m.totals(0).others_waited_for_me_s, 0, 1e-9);
  auto s = m.FindStraggler(10);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->bound, StragglerMonitor::Bound::kInput);
  EXPECT_NEAR(s->median_wait_s, 0.040, 1e-9);
  EXPECT_EQ(m.StragglerLine(10, Describe),
            "straggler: rank 2 (h:1) arrived last in 10 of 10 steps, the others waiting 40.0 ms "
            "for it (median); input-bound: 100% of that wait came before its first op of the step "
            "(it starts its steps late: data loading or the forward pass)");
}

TEST(StragglerMonitor, AComputeBoundRankIsNamed) {
  StragglerMonitor m(3, 5ms);
  Clock::time_point t{};
  for (int i = 0; i < 10; ++i) Step(m, t, /*input=*/false, 30);
  auto s = m.FindStraggler(10);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->bound, StragglerMonitor::Bound::kCompute);
  EXPECT_NEAR(m.totals(2).waited_before_first_s, 0, 1e-9);
  EXPECT_NE(m.StragglerLine(10, Describe).find("compute-bound"), std::string::npos);
}

TEST(StragglerMonitor, WaitsUnderTheThresholdOrFewStepsNameNobody) {
  StragglerMonitor m(3, 5ms);
  Clock::time_point t{};
  for (int i = 0; i < 10; ++i) Step(m, t, true, 2);  // 2 ms late: under the threshold
  EXPECT_EQ(m.totals(2).last_steps, 0u);
  EXPECT_FALSE(m.FindStraggler(10).has_value());
  EXPECT_EQ(m.StragglerLine(10, Describe), "");
  StragglerMonitor few(3, 5ms);
  for (int i = 0; i < 5; ++i) Step(few, t, true, 40);
  EXPECT_FALSE(few.FindStraggler(10).has_value());  // too few steps to tell
  EXPECT_TRUE(few.FindStraggler(5).has_value());
}

TEST(StragglerMonitor, NoRankLastInMostStepsIsNoStraggler) {
  StragglerMonitor m(2, 1ms);
  Clock::time_point t{};
  for (int i = 0; i < 10; ++i) {
    const bool first_late = i % 2 == 0;  // they take turns
    m.Observe(t, {first_late ? kIdle : kHolding, first_late ? kHolding : kIdle});
    t += 20ms;
    m.Observe(t, {kDone, kDone});
    m.Observe(t, {kIdle, kIdle});
  }
  EXPECT_EQ(m.steps(), 10u);
  EXPECT_EQ(m.totals(0).last_steps, 5u);
  EXPECT_EQ(m.totals(1).last_steps, 5u);
  EXPECT_FALSE(m.FindStraggler(1).has_value());
}

}  // namespace
}  // namespace korovod
