// RetryOnConflict: a 409 re-reads and retries; other errors come back at once.
#include "operator/kube/conflict_retry.h"

#include <gtest/gtest.h>

#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

using testing::FakeApiServer;
using testing::StatusBody;

class ConflictRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.server().Get("/api/v1/namespaces/ns/configmaps/c",
                       [this](const httplib::Request&, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu_);
                         ++gets_;
                         res.set_content(stored_.dump(), "application/json");
                       });
    auto put = [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      puts_.push_back(req.path);
      if (conflicts_ > 0) {
        --conflicts_;
        stored_["metadata"]["resourceVersion"] = std::to_string(
            std::stoi(stored_["metadata"]["resourceVersion"].get<std::string>()) + 1);
        res.status = 409;
        res.set_content(StatusBody(409, "Conflict", "the object has been modified"),
                        "application/json");
        return;
      }
      if (forbidden_) {
        res.status = 403;
        res.set_content(StatusBody(403, "Forbidden", "no update on configmaps"),
                        "application/json");
        return;
      }
      stored_ = nlohmann::json::parse(req.body);
      res.set_content(stored_.dump(), "application/json");
    };
    fake_.server().Put("/api/v1/namespaces/ns/configmaps/c", put);
    fake_.server().Put("/api/v1/namespaces/ns/configmaps/c/status", put);
    fake_.Start();
    client_ = fake_.Client();
  }

  FakeApiServer fake_;
  std::unique_ptr<ApiClient> client_;
  std::mutex mu_;
  nlohmann::json stored_ = {{"metadata", {{"name", "c"}, {"resourceVersion", "1"}}},
                            {"data", {{"n", "0"}}}};
  int gets_ = 0;
  int conflicts_ = 0;
  bool forbidden_ = false;
  std::vector<std::string> puts_;
};

TEST_F(ConflictRetryTest, RetriesOnceAfterAConflict) {
  conflicts_ = 1;
  std::vector<std::string> seen_rv;
  ApiResult r =
      RetryOnConflict(*client_, "/api/v1/namespaces/ns/configmaps/c", [&](nlohmann::json& o) {
        seen_rv.push_back(o["metadata"]["resourceVersion"]);
        o["data"]["n"] = "1";
        return OkStatus();
      });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(gets_, 2);
  EXPECT_EQ(puts_.size(), 2u);
  EXPECT_EQ(seen_rv, (std::vector<std::string>{"1", "2"}));  // re-read after the conflict
  EXPECT_EQ(r.value()["data"]["n"], "1");
}

TEST_F(ConflictRetryTest, StatusSubresourceAndGivingUp) {
  conflicts_ = 10;
  RetryOnConflictOptions options;
  options.max_attempts = 3;
  options.status_subresource = true;
  options.backoff = std::chrono::milliseconds(1);
  ApiResult r = RetryOnConflict(
      *client_, "/api/v1/namespaces/ns/configmaps/c", [](nlohmann::json&) { return OkStatus(); },
      options);
  EXPECT_TRUE(IsConflict(r));
  EXPECT_NE(r.status().message().find("3 conflicts"), std::string::npos);
  ASSERT_EQ(puts_.size(), 3u);
  EXPECT_EQ(puts_[0], "/api/v1/namespaces/ns/configmaps/c/status");
}

TEST_F(ConflictRetryTest, OtherErrorsReturnAtOnce) {
  forbidden_ = true;
  ApiResult r = RetryOnConflict(*client_, "/api/v1/namespaces/ns/configmaps/c",
                                [](nlohmann::json&) { return OkStatus(); });
  EXPECT_EQ(r.http_code(), 403);
  EXPECT_EQ(gets_, 1);
  ApiResult aborted = RetryOnConflict(*client_, "/api/v1/namespaces/ns/configmaps/c",
                                      [](nlohmann::json&) { return Aborted("nothing to do"); });
  EXPECT_NE(aborted.status().message().find("nothing to do"), std::string::npos);
  EXPECT_EQ(puts_.size(), 1u);
  ApiResult missing = RetryOnConflict(*client_, "/api/v1/namespaces/ns/configmaps/zz",
                                      [](nlohmann::json&) { return OkStatus(); });
  EXPECT_TRUE(IsNotFound(missing));
}

}  // namespace
}  // namespace korovod::kube
