// WriteJobStatus: the /status write is a merge patch of the changed fields that carries the
// resourceVersion read; a 409 re-reads the job, recomputes the status from the fresh object and
// writes again.
#include "operator/manager/status_writer.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

using kube::testing::FakeApiServer;
using kube::testing::StatusBody;
using nlohmann::json;

constexpr char kPath[] = "/apis/korovod.dev/v1alpha1/namespaces/ns/horovodjobs/j";

class StatusWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.server().Get(kPath, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++gets_;
      if (gone_) {
        res.status = 404;
        res.set_content(StatusBody(404, "NotFound", "horovodjobs \"j\" not found"),
                        "application/json");
        return;
      }
      res.set_content(stored_.dump(), "application/json");
    });
    fake_.server().Patch(std::string(kPath) + "/status", [this](const httplib::Request& req,
                                                                httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      json body = json::parse(req.body);
      writes_.push_back(body);
      content_types_.push_back(req.get_header_value("Content-Type"));
      // The API server's optimistic concurrency.
      if (body["metadata"]["resourceVersion"] != stored_["metadata"]["resourceVersion"]) {
        res.status = code_on_mismatch_;
        res.set_content(
            StatusBody(code_on_mismatch_, code_on_mismatch_ == 409 ? "Conflict" : "Forbidden",
                       "the object has been modified"),
            "application/json");
        return;
      }
      if (!stored_.contains("status")) stored_["status"] = json::object();
      stored_["status"].merge_patch(body["status"]);
      stored_["metadata"]["resourceVersion"] =
          std::to_string(std::stoi(body["metadata"]["resourceVersion"].get<std::string>()) + 1);
      res.set_content(stored_.dump(), "application/json");
    });
    fake_.Start();
    client_ = fake_.Client();
  }

  // The job as the operator read it earlier: resourceVersion 1.
  json Read() const {
    return {{"metadata", {{"name", "j"}, {"namespace", "ns"}, {"resourceVersion", "1"}}},
            {"spec", {{"replicas", 2}}}};
  }

  FakeApiServer fake_;
  std::unique_ptr<kube::ApiClient> client_;
  std::mutex mu_;
  json stored_ = {{"metadata", {{"name", "j"}, {"namespace", "ns"}, {"resourceVersion", "1"}}},
                  {"spec", {{"replicas", 2}}}};
  int gets_ = 0;
  bool gone_ = false;
  int code_on_mismatch_ = 409;
  std::vector<json> writes_;
  std::vector<std::string> content_types_;
};

TEST_F(StatusWriterTest, WritesWithTheResourceVersionRead) {
  auto out = WriteJobStatus(*client_, Read(), {{"phase", "Running"}},
                            [](const json&) -> std::optional<json> {
                              ADD_FAILURE() << "no recompute without a conflict";
                              return std::nullopt;
                            });
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.conflicts, 0);
  ASSERT_EQ(writes_.size(), 1u);
  EXPECT_EQ(writes_[0]["metadata"]["resourceVersion"], "1");
  EXPECT_EQ(stored_["status"]["phase"], "Running");
}

TEST_F(StatusWriterTest, ConflictReReadsRecomputesAndWritesAgain) {
  // Someone else changed the job (a new generation with 3 replicas) after the operator read it.
  stored_["metadata"]["resourceVersion"] = "7";
  stored_["spec"]["replicas"] = 3;
  std::vector<int64_t> seen_replicas;
  auto out = WriteJobStatus(*client_, Read(), {{"phase", "Running"}, {"note", "stale"}},
                            [&](const json& fresh) -> std::optional<json> {
                              seen_replicas.push_back(fresh["spec"]["replicas"].get<int64_t>());
                              return json{{"phase", "Restarting"}, {"note", "fresh"}};
                            });
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(out.conflicts, 1);
  EXPECT_EQ(seen_replicas, std::vector<int64_t>{3});  // recomputed from the fresh object
  ASSERT_EQ(writes_.size(), 2u);
  EXPECT_EQ(writes_[1]["metadata"]["resourceVersion"], "7");
  EXPECT_EQ(stored_["status"]["note"], "fresh");  // the stale status never landed
  EXPECT_EQ(stored_["spec"]["replicas"], 3);      // and the other writer's change survived
}

TEST_F(StatusWriterTest, NothingToWriteAfterTheReReadStopsQuietly) {
  stored_["metadata"]["resourceVersion"] = "2";
  auto out = WriteJobStatus(*client_, Read(), {{"phase", "Running"}},
                            [](const json&) -> std::optional<json> { return std::nullopt; });
  EXPECT_TRUE(out.status.ok());
  EXPECT_EQ(out.conflicts, 1);
  EXPECT_EQ(writes_.size(), 1u);
}

TEST_F(StatusWriterTest, GivesUpAfterMaxAttemptsNamingTheJob) {
  // Every re-read is stale again by the time of the write: another writer keeps winning.
  stored_["metadata"]["resourceVersion"] = "2";
  int calls = 0;
  auto out = WriteJobStatus(
      *client_, Read(), {{"phase", "Running"}},
      [&](const json&) -> std::optional<json> {
        std::lock_guard<std::mutex> lock(mu_);
        stored_["metadata"]["resourceVersion"] = std::to_string(100 + ++calls);
        return json{{"phase", "Running"}};
      },
      3);
  EXPECT_FALSE(out.status.ok());
  EXPECT_EQ(out.conflicts, 2);
  EXPECT_EQ(writes_.size(), 3u);
  EXPECT_NE(out.status.message().find("HorovodJob ns/j"), std::string::npos)
      << out.status.ToString();
  EXPECT_NE(out.status.message().find("409"), std::string::npos) << out.status.ToString();
}

TEST_F(StatusWriterTest, DeletedMeanwhileIsNotAnError) {
  stored_["metadata"]["resourceVersion"] = "2";
  gone_ = true;
  auto out = WriteJobStatus(*client_, Read(), {{"phase", "Running"}},
                            [](const json&) -> std::optional<json> { return json::object(); });
  EXPECT_TRUE(out.status.ok()) << out.status.ToString();
  EXPECT_EQ(gets_, 1);
}

TEST_F(StatusWriterTest, OtherErrorsReturnAtOnce) {
  stored_["metadata"]["resourceVersion"] = "2";
  code_on_mismatch_ = 403;
  auto out = WriteJobStatus(*client_, Read(), {{"phase", "Running"}},
                            [](const json&) -> std::optional<json> { return json::object(); });
  EXPECT_FALSE(out.status.ok());
  EXPECT_EQ(out.conflicts, 0);
  EXPECT_EQ(gets_, 0);
  EXPECT_NE(out.status.message().find("403"), std::string::npos) << out.status.ToString();
}

TEST_F(StatusWriterTest, PatchCarriesOnlyTheChangedFields) {
  json read = Read();
  read["status"] = {{"phase", "Running"},
                    {"readyWorkers", 3},
                    {"rankSummary", "Ready:0-2 Pending:3"},
                    {"workers", json::array({{{"rank", 3}, {"state", "Pending"}}})},
                    {"elastic", {{"epoch", 4}, {"members", "0-3"}}}};
  stored_["status"] = read["status"];
  json next = read["status"];
  next["readyWorkers"] = 4;
  next["rankSummary"] = "Ready:0-3";
  next.erase("workers");
  next["elastic"]["epoch"] = 5;
  auto out = WriteJobStatus(*client_, read, next, [](const json&) -> std::optional<json> {
    ADD_FAILURE() << "no recompute without a conflict";
    return std::nullopt;
  });
  ASSERT_TRUE(out.status.ok()) << out.status.ToString();
  ASSERT_EQ(writes_.size(), 1u);
  EXPECT_EQ(content_types_[0], "application/merge-patch+json");
  // Only what changed: no phase, no members; a removed list is a null.
  EXPECT_EQ(writes_[0], json::parse(R"({"metadata": {"resourceVersion": "1"},
      "status": {"readyWorkers": 4, "rankSummary": "Ready:0-3", "workers": null,
                 "elastic": {"epoch": 5}}})"));
  EXPECT_EQ(stored_["status"], next);
}

TEST_F(StatusWriterTest, AStatusAlreadyStoredIsNotWritten) {
  json read = Read();
  read["status"] = {{"phase", "Running"}};
  auto out = WriteJobStatus(*client_, read, {{"phase", "Running"}},
                            [](const json&) -> std::optional<json> { return std::nullopt; });
  EXPECT_TRUE(out.status.ok());
  EXPECT_TRUE(writes_.empty());
}

TEST(MergePatch, FollowsRfc7386) {
  EXPECT_EQ(MergePatch(json::object(), json::object()), json::object());
  EXPECT_EQ(MergePatch(json{{"a", 1}, {"b", {{"c", 1}, {"d", 2}}}},
                       json{{"b", {{"c", 1}, {"d", 3}, {"e", "x"}}}, {"f", json::array({1})}}),
            json::parse(R"({"a": null, "b": {"d": 3, "e": "x"}, "f": [1]})"));
  // Applying the patch gives the target.
  json from = {{"x", {{"y", json::array({1, 2})}, {"z", "q"}}}, {"k", 1}};
  const json to = {{"x", {{"y", json::array({2})}}}, {"n", {{"m", true}}}};
  from.merge_patch(MergePatch(from, to));
  EXPECT_EQ(from, to);
}

}  // namespace
}  // namespace korovod::k8s_operator
