// PodExpectations with an injected clock: an elastic job's pod set waits for the cache to see
// the operator's own creates and deletes, or for the timeout.
#include "operator/manager/pod_expectations.h"

#include <gtest/gtest.h>

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

json Pod(const std::string& name, const std::string& uid, bool terminating = false) {
  json pod = {{"metadata", {{"name", name}, {"uid", uid}}}};
  if (terminating) pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  return pod;
}

class PodExpectationsTest : public ::testing::Test {
 protected:
  std::chrono::steady_clock::time_point now_{};
  PodExpectations expectations_{std::chrono::minutes(5), [this] { return now_; }};
};

TEST_F(PodExpectationsTest, NothingExpectedIsSatisfied) {
  EXPECT_TRUE(expectations_.Satisfied("ns/j", {}).satisfied);
}

TEST_F(PodExpectationsTest, CreatesWaitUntilTheCacheHasThePods) {
  expectations_.ExpectCreate("ns/j", "j-worker-0");
  expectations_.ExpectCreate("ns/j", "j-worker-1");
  PodExpectations::Check lagging = expectations_.Satisfied("ns/j", {});
  EXPECT_FALSE(lagging.satisfied);
  EXPECT_NE(lagging.pending.find("create of pod j-worker-0"), std::string::npos);
  EXPECT_EQ(lagging.time_left, std::chrono::minutes(5));
  EXPECT_TRUE(expectations_.Satisfied("ns/other", {}).satisfied);  // per job
  EXPECT_FALSE(expectations_.Satisfied("ns/j", {Pod("j-worker-0", "u0")}).satisfied);
  expectations_.Observed("ns/j", Pod("j-worker-1", "u1"), /*deleted=*/true);  // add + delete
  EXPECT_TRUE(expectations_.Satisfied("ns/j", {}).satisfied);
}

TEST_F(PodExpectationsTest, DeletesWaitUntilThePodIsGoneOrTerminating) {
  expectations_.ExpectDelete("ns/j", "u0");
  expectations_.ExpectDelete("ns/j", "u1");
  EXPECT_FALSE(expectations_.Satisfied("ns/j", {Pod("j-worker-0", "u0"), Pod("j-worker-1", "u1")})
                   .satisfied);
  EXPECT_FALSE(expectations_.Satisfied("ns/j", {Pod("j-worker-1", "u1")}).satisfied);
  EXPECT_TRUE(expectations_.Satisfied("ns/j", {Pod("j-worker-1", "u1", true)}).satisfied);
}

TEST_F(PodExpectationsTest, TimeOutSoALostEventNeverStallsTheJob) {
  expectations_.ExpectCreate("ns/j", "j-worker-0");
  now_ += std::chrono::minutes(4);
  PodExpectations::Check check = expectations_.Satisfied("ns/j", {});
  EXPECT_FALSE(check.satisfied);
  EXPECT_EQ(check.time_left, std::chrono::minutes(1));
  now_ += std::chrono::minutes(1);
  EXPECT_TRUE(expectations_.Satisfied("ns/j", {}).satisfied);
}

TEST_F(PodExpectationsTest, ForgetDropsAJobsExpectations) {
  expectations_.ExpectCreate("ns/j", "j-worker-0");
  expectations_.Forget("ns/j");
  EXPECT_TRUE(expectations_.Satisfied("ns/j", {}).satisfied);
}

}  // namespace
}  // namespace korovod::k8s_operator
