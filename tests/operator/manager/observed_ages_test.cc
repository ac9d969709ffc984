// ObservedAges: each timed value is aged from its first sight by the operator's monotonic clock,
// whatever the value says.
#include "operator/manager/observed_ages.h"

#include <gtest/gtest.h>

#include "operator/controller/observed_state.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using std::chrono::seconds;

TEST(ObservedAges, AgesFromFirstSightNotFromTheValue) {
  std::chrono::steady_clock::time_point now{};
  ObservedAges ages([&now] { return now; });
  // Written two hours "ago" by another clock: still 0 s old when first seen.
  json job = {
      {"status",
       {{"startTime", "2027-01-15T06:00:00Z"}, {"completionTime", "2027-01-15T06:10:00Z"}}}};
  const json terminating = {
      {"metadata", {{"uid", "p1"}, {"deletionTimestamp", "2027-01-15T06:20:00Z"}}}};
  const json running = {{"metadata", {{"uid", "p2"}}}};
  auto got = ages.Observe("ns/j", job, {terminating, running});
  EXPECT_EQ(got, (std::map<std::string, int64_t>{
                     {ObservedAgeKey("startTime", "2027-01-15T06:00:00Z"), 0},
                     {ObservedAgeKey("completionTime", "2027-01-15T06:10:00Z"), 0},
                     {ObservedAgeKey("deletionTimestamp/p1", "2027-01-15T06:20:00Z"), 0}}));

  now += seconds(42);
  got = ages.Observe("ns/j", job, {terminating, running});
  EXPECT_EQ(got[ObservedAgeKey("completionTime", "2027-01-15T06:10:00Z")], 42);
  EXPECT_EQ(got[ObservedAgeKey("deletionTimestamp/p1", "2027-01-15T06:20:00Z")], 42);

  // A new value starts again; the value it replaced is forgotten (it would not come back).
  job["status"]["startTime"] = "2027-01-15T06:05:00Z";
  now += seconds(8);
  got = ages.Observe("ns/j", job, {});
  EXPECT_EQ(got, (std::map<std::string, int64_t>{
                     {ObservedAgeKey("startTime", "2027-01-15T06:05:00Z"), 0},
                     {ObservedAgeKey("completionTime", "2027-01-15T06:10:00Z"), 50}}));
  EXPECT_EQ(ages.JobsKept(), 1u);
  ages.Forget("ns/j");
  EXPECT_EQ(ages.JobsKept(), 0u);
  EXPECT_EQ(ages.Observe("ns/j", job, {})[ObservedAgeKey("completionTime", "2027-01-15T06:10:00Z")],
            0);
}

}  // namespace
}  // namespace korovod::k8s_operator
