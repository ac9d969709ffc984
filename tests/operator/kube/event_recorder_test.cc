// EventRecorder: the Event posted and its failure path.
#include "operator/kube/event_recorder.h"

#include <gtest/gtest.h>

#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

using testing::FakeApiServer;

const nlohmann::json kJob = {
    {"apiVersion", "korovod.io/v1alpha1"},
    {"kind", "HorovodJob"},
    {"metadata",
     {{"name", "job1"}, {"namespace", "team"}, {"uid", "u-1"}, {"resourceVersion", "42"}}}};

TEST(EventRecorderTest, PostsACoreEvent) {
  FakeApiServer fake;
  std::mutex mu;
  nlohmann::json posted;
  std::string path;
  fake.server().Post(R"(/api/v1/namespaces/(\w+)/events)", [&](const httplib::Request& req,
                                                               httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    path = req.path;
    posted = nlohmann::json::parse(req.body);
    if (req.matches[1] == "denied") {
      res.status = 403;
      res.set_content(testing::StatusBody(403, "Forbidden", "no events"), "application/json");
      return;
    }
    res.status = 201;
    res.set_content(req.body, "application/json");
  });
  fake.Start();
  auto client = fake.Client();
  const auto t = std::chrono::system_clock::from_time_t(1795348800);
  EventRecorder recorder(*client, "korovod-operator", [t] { return t; });
  ApiResult r = recorder.Record(kJob, EventType::kWarning, "GangTimeout", "3 of 4 pods pending");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(path, "/api/v1/namespaces/team/events");
  EXPECT_EQ(posted["kind"], "Event");
  EXPECT_EQ(posted["apiVersion"], "v1");
  EXPECT_EQ(posted["metadata"]["namespace"], "team");
  EXPECT_EQ(posted["metadata"]["name"].get<std::string>().rfind("job1.", 0), 0u);
  EXPECT_GT(posted["metadata"]["name"].get<std::string>().size(), 6u);
  EXPECT_EQ(posted["involvedObject"], (nlohmann::json{{"apiVersion", "korovod.io/v1alpha1"},
                                                      {"kind", "HorovodJob"},
                                                      {"name", "job1"},
                                                      {"namespace", "team"},
                                                      {"uid", "u-1"},
                                                      {"resourceVersion", "42"}}));
  EXPECT_EQ(posted["type"], "Warning");
  EXPECT_EQ(posted["reason"], "GangTimeout");
  EXPECT_EQ(posted["message"], "3 of 4 pods pending");
  EXPECT_EQ(posted["source"]["component"], "korovod-operator");
  EXPECT_EQ(posted["firstTimestamp"], "2026-11-22T12:00:00Z");
  EXPECT_EQ(posted["lastTimestamp"], "2026-11-22T12:00:00Z");
  EXPECT_EQ(posted["count"], 1);

  // Two events in the same instant still get distinct names.
  auto a = recorder.MakeEvent(kJob, EventType::kNormal, "R", "m");
  auto b = recorder.MakeEvent(kJob, EventType::kNormal, "R", "m");
  EXPECT_NE(a["metadata"]["name"], b["metadata"]["name"]);
  EXPECT_EQ(a["type"], "Normal");

  nlohmann::json denied = kJob;
  denied["metadata"]["namespace"] = "denied";
  ApiResult failed = recorder.Record(denied, EventType::kNormal, "Started", "m");
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.http_code(), 403);
  EXPECT_NE(failed.status().message().find("HorovodJob denied/job1"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("Forbidden"), std::string::npos);

  EXPECT_FALSE(recorder.Record(nlohmann::json::object(), EventType::kNormal, "R", "m").ok());
}

}  // namespace
}  // namespace korovod::kube
