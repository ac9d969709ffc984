// operator/api: the compact status shape (finishedRanks, unlistedWorkers, status.elastic's
// members and memberUids) through JSON and back, the older elastic shape read into it, and the
// rank ranges it is written with.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/api/json.h"
#include "operator/api/rank_ranges.h"
#include "operator/api/types.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

TEST(RankRanges, RoundTripKeepingTheOrder) {
  const std::vector<std::vector<int64_t>> lists = {
      {}, {0}, {0, 1, 2, 3}, {0, 1, 2, 3, 7, 9, 10}, {4, 5, 0, 1}, {10, 2, 100, 101, 3}};
  for (const auto& list : lists) {
    const std::string text = FormatRanges(list);
    auto back = ParseRanges(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().ToString();
    EXPECT_EQ(*back, list) << text;
  }
  EXPECT_EQ(FormatRanges({0, 1, 2, 3, 7, 9, 10}), "0-3,7,9-10");
  EXPECT_EQ(FormatRanges({4, 5, 0, 1}), "4-5,0-1");
}

TEST(RankRanges, BadTextIsAnErrorNamingTheItem) {
  for (const char* bad : {"x", "1,,2", "3-1", "-1", "1-", "1-2-3", "0,", " 1"}) {
    auto r = ParseRanges(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_EQ(ParseRanges("0-2,3-x").status().message(),
            "\"3-x\" is not a rank or an ascending range a-b");
  // A range a hostile or broken status could use to make the operator allocate without bound.
  EXPECT_NE(ParseRanges("0-9999999999").status().message().find("more than"), std::string::npos);
}

TEST(StatusJson, CompactShapeRoundTrips) {
  const json status = json::parse(R"({
    "conditions": [], "readyWorkers": 4000, "activeWorkers": 4090, "succeededWorkers": 5,
    "failedWorkers": 1, "restartCount": 0, "observedGeneration": 1, "epoch": 1,
    "workers": [{"rank": 7, "pod": "j-worker-7", "state": "Pending", "reason": "ImagePullBackOff",
                 "message": "Back-off"}],
    "unlistedWorkers": 12,
    "finishedRanks": [{"ranks": "0-3,9", "state": "Succeeded", "reason": "Completed"},
                      {"ranks": "5", "state": "Failed", "reason": "Error", "message": "exit 3"}],
    "rankSummary": "Pending:7",
    "elastic": {"epoch": 2, "resets": 1, "version": 9, "members": "4-5,0-1",
                "memberUids": "0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d", "rendezvousPort": 7000}})");
  auto parsed = HorovodJobStatusFromJson(status);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->unlisted_workers, 12);
  ASSERT_EQ(parsed->finished_ranks.size(), 2u);
  EXPECT_EQ(parsed->finished_ranks[1].state, WorkerState::kFailed);
  ASSERT_TRUE(parsed->elastic);
  EXPECT_EQ(parsed->elastic->members, (std::vector<int64_t>{4, 5, 0, 1}));
  EXPECT_EQ(parsed->elastic->member_uids,
            (std::vector<std::string>{"0a1b2c3d", "4e5f6a7b", "8c9d0e1f", "2a3b4c5d"}));
  EXPECT_EQ(ToJson(*parsed), status);
}

TEST(StatusJson, TheOlderElasticShapeIsReadIntoTheCompactOne) {
  // Written by an operator before members/memberUids: a new leader still resumes from it.
  const json status = json::parse(R"({"elastic": {"epoch": 3, "resets": 0, "version": 5,
      "world": ["team.exp-worker-2", "team.exp-worker-0"],
      "workerIds": ["team.exp-worker-2.uid-b", "team.exp-worker-0.uid-a"],
      "rendezvousPort": 7000}})");
  auto parsed = HorovodJobStatusFromJson(status);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->elastic->members, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(parsed->elastic->member_uids,
            (std::vector<std::string>{UidDigest("uid-b"), UidDigest("uid-a")}));
  EXPECT_EQ(ToJson(*parsed)["elastic"]["members"], "2,0");
  EXPECT_FALSE(ToJson(*parsed)["elastic"].contains("workerIds"));
}

TEST(StatusJson, BadCompactFieldsNameTheField) {
  struct Case {
    const char* status;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({"finishedRanks": [{"ranks": "1-x", "state": "Succeeded"}]})",
                "status.finishedRanks[0].ranks: \"1-x\" is not a rank or an ascending range a-b"},
           Case{R"({"finishedRanks": [{"ranks": "1", "state": "Ready"}]})",
                "status.finishedRanks[0].state: must be Succeeded or Failed"},
           Case{R"({"elastic": {"members": "0-1", "memberUids": "0a1b2c3d"}})",
                "status.elastic.memberUids: must hold 8 hex digits for each of the 2 members"},
           Case{R"({"elastic": {"workerIds": ["nodot"]}})",
                "status.elastic.workerIds[0]: must be \"<pod>.<uid>\""},
       }) {
    auto parsed = HorovodJobStatusFromJson(json::parse(c.status));
    ASSERT_FALSE(parsed.ok()) << c.status;
    EXPECT_EQ(parsed.status().message(), c.message);
  }
}

TEST(UidDigest, IsFnv1aIn8HexDigits) {
  EXPECT_EQ(UidDigest(""), "811c9dc5");  // FNV-1a's offset basis
  EXPECT_EQ(UidDigest("a"), "e40c292c");
  EXPECT_NE(UidDigest("0c4f6a1e-7d2b-4c8e-9f3a-2b1d6e5f7a90"),
            UidDigest("0c4f6a1e-7d2b-4c8e-9f3a-2b1d6e5f7a91"));
}

}  // namespace
}  // namespace korovod::k8s_operator
