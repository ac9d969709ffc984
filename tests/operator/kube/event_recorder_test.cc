// EventRecorder: the Event posted and its failure path, and repeats aggregated into one Event
// with a count (client-go's EventCorrelator) within a bounded LRU of keys.
#include "operator/kube/event_recorder.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

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

// The events a fake API server holds: POST creates, a merge PATCH updates, by name.
class FakeEvents {
 public:
  explicit FakeEvents(FakeApiServer& fake) {
    fake.server().Post(R"(/api/v1/namespaces/(\w+)/events)",
                       [this](const httplib::Request& req, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu_);
                         const nlohmann::json e = nlohmann::json::parse(req.body);
                         stored_[e["metadata"]["name"].get<std::string>()] = e;
                         ++posts_;
                         res.status = 201;
                         res.set_content(req.body, "application/json");
                       });
    fake.server().Patch(R"(/api/v1/namespaces/(\w+)/events/([^/]+))",
                        [this](const httplib::Request& req, httplib::Response& res) {
                          std::lock_guard<std::mutex> lock(mu_);
                          patches_.push_back(nlohmann::json::parse(req.body));
                          auto it = stored_.find(req.matches[2]);
                          if (it == stored_.end()) {
                            res.status = 404;
                            res.set_content(testing::StatusBody(404, "NotFound", "gone"),
                                            "application/json");
                            return;
                          }
                          it->second.merge_patch(patches_.back());
                          res.set_content(it->second.dump(), "application/json");
                        });
  }
  int posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }
  std::vector<nlohmann::json> patches() {
    std::lock_guard<std::mutex> lock(mu_);
    return patches_;
  }
  std::vector<nlohmann::json> stored() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<nlohmann::json> out;
    for (const auto& [name, e] : stored_) out.push_back(e);
    return out;
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    stored_.clear();
  }

 private:
  std::mutex mu_;
  std::map<std::string, nlohmann::json> stored_;
  std::vector<nlohmann::json> patches_;
  int posts_ = 0;
};

TEST(EventRecorderTest, ARepeatWithinTheWindowPatchesTheCountOfTheSameEvent) {
  FakeApiServer fake;
  FakeEvents events(fake);
  fake.Start();
  auto client = fake.Client();
  auto t = std::chrono::system_clock::from_time_t(1795348800);
  EventRecorder recorder(*client, "korovod-operator", [&t] { return t; });
  for (int i = 0; i < 3; ++i) {
    nlohmann::json job = kJob;
    job["metadata"]["resourceVersion"] = std::to_string(42 + i);  // moves with status writes
    ApiResult r = recorder.Record(job, EventType::kWarning, "WorkersNotStarting", "image pull");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    t += std::chrono::seconds(30);
  }
  EXPECT_EQ(events.posts(), 1);
  ASSERT_EQ(events.patches().size(), 2u);
  EXPECT_EQ(events.patches()[1],
            (nlohmann::json{{"count", 3}, {"lastTimestamp", "2026-11-22T12:01:00Z"}}));
  ASSERT_EQ(events.stored().size(), 1u);
  const nlohmann::json one = events.stored()[0];
  EXPECT_EQ(one["count"], 3);
  EXPECT_EQ(one["firstTimestamp"], "2026-11-22T12:00:00Z");
  EXPECT_EQ(one["lastTimestamp"], "2026-11-22T12:01:00Z");

  // Another message, type or object (a recreated job: another uid) is another event.
  ASSERT_TRUE(recorder.Record(kJob, EventType::kWarning, "WorkersNotStarting", "other").ok());
  ASSERT_TRUE(recorder.Record(kJob, EventType::kNormal, "WorkersNotStarting", "image pull").ok());
  nlohmann::json recreated = kJob;
  recreated["metadata"]["uid"] = "u-2";
  ASSERT_TRUE(
      recorder.Record(recreated, EventType::kWarning, "WorkersNotStarting", "image pull").ok());
  EXPECT_EQ(events.posts(), 4);

  // Past the window since the last one: a new Event.
  t += std::chrono::seconds(601);
  ASSERT_TRUE(recorder.Record(kJob, EventType::kWarning, "WorkersNotStarting", "image pull").ok());
  EXPECT_EQ(events.posts(), 5);

  // The Event expired meanwhile (the API server's event TTL): created again, not an error.
  events.Forget();
  ApiResult again = recorder.Record(kJob, EventType::kWarning, "WorkersNotStarting", "image pull");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(events.posts(), 6);
  EXPECT_EQ(again.value()["count"], 1);
}

TEST(EventRecorderTest, KeysAreKeptInABoundedLru) {
  FakeApiServer fake;
  FakeEvents events(fake);
  fake.Start();
  auto client = fake.Client();
  const auto t = std::chrono::system_clock::from_time_t(1795348800);
  EventRecorder recorder(
      *client, "korovod-operator", [t] { return t; },
      EventAggregation{std::chrono::seconds(600), 2});
  for (const char* m : {"a", "b", "a", "c"}) {
    ASSERT_TRUE(recorder.Record(kJob, EventType::kNormal, "R", m).ok());
  }
  EXPECT_EQ(recorder.cached_keys(), 2u);
  EXPECT_EQ(events.posts(), 3);  // a, b, c; the second a was a patch
  // b was the least recently used: evicted by c, so a repeat of it is a new Event; a is kept.
  ASSERT_TRUE(recorder.Record(kJob, EventType::kNormal, "R", "b").ok());
  EXPECT_EQ(events.posts(), 4);
  ASSERT_TRUE(recorder.Record(kJob, EventType::kNormal, "R", "c").ok());
  EXPECT_EQ(events.posts(), 4);
  EXPECT_EQ(recorder.cached_keys(), 2u);
}

}  // namespace
}  // namespace korovod::kube
