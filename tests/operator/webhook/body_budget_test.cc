// BodyBudget: reservations up to the total and each address's share; released when dropped.
#include "operator/webhook/body_budget.h"

#include <gtest/gtest.h>

namespace korovod::k8s_operator {
namespace {

TEST(BodyBudget, AnAddressGetsItsShareAndTheRestWaitForTheTotal) {
  BodyBudget budget({.total_bytes = 10, .per_source_bytes = 6});
  auto a1 = budget.TryReserve("10.0.0.1", 4);
  ASSERT_TRUE(a1);
  EXPECT_FALSE(budget.TryReserve("10.0.0.1", 3)) << "over 10.0.0.1's share of 6";
  auto a2 = budget.TryReserve("10.0.0.1", 2);
  ASSERT_TRUE(a2);
  auto b1 = budget.TryReserve("10.0.0.2", 4);
  ASSERT_TRUE(b1);
  EXPECT_FALSE(budget.TryReserve("10.0.0.3", 1)) << "the total of 10 is used up";
  EXPECT_EQ(budget.in_use(), 10u);
  a1.reset();
  EXPECT_EQ(budget.in_use(), 6u);
  EXPECT_TRUE(budget.TryReserve("10.0.0.3", 4)) << "released bytes are free again";
  EXPECT_EQ(budget.in_use(), 6u) << "a dropped reservation gives its bytes back";
}

TEST(BodyBudget, AMovedReservationIsReleasedOnce) {
  BodyBudget budget({.total_bytes = 8, .per_source_bytes = 8});
  {
    std::optional<BodyBudget::Reservation> held;
    if (auto r = budget.TryReserve("x", 8)) held.emplace(std::move(*r));
    EXPECT_EQ(budget.in_use(), 8u);
  }
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_TRUE(budget.TryReserve("x", 8));
}

}  // namespace
}  // namespace korovod::k8s_operator
