// JobController against the in-process fake API server: informers -> queue -> reconcile ->
// executor, end to end. Children are the job's only when they name its uid as their controller
// (the labels are only a watch filter), so a job recreated under the name of one whose pods are
// still there does not adopt them. Secrets are never listed or watched: the key Secret is read by
// name.
#include "operator/manager/job_controller.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/http/metrics_registry.h"
#include "tests/operator/controller/fake_cluster.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

using kube::testing::Eventually;
using kube::testing::FakeApiServer;
using kube::testing::FakeWatchStream;
using nlohmann::json;

constexpr char kJobs[] = "/apis/korovod.dev/v1alpha1/namespaces/ns/horovodjobs";
constexpr int64_t kT0 = 1800000000;

// Serves one job and a fixed set of children (lists, idle watches); records every write.
class FakeNamespace {
 public:
  FakeNamespace(json job, std::map<std::string, std::vector<json>> children)
      : job_(std::move(job)), children_(std::move(children)) {
    for (const char* resource : {"pods", "services", "configmaps"}) {
      streams_[resource] = std::make_unique<FakeWatchStream>(fake_);
      fake_.server().Get(std::string("/api/v1/namespaces/ns/") + resource,
                         [this, resource](const httplib::Request& req, httplib::Response& res) {
                           ServeList(resource, req, res);
                         });
    }
    // Secrets: a GET by name only; a list or watch is recorded (and must never happen).
    fake_.server().Get("/api/v1/namespaces/ns/secrets", [this](const httplib::Request& req,
                                                               httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      secret_lists_.push_back(req.target);
      res.status = 403;
      res.set_content(kube::testing::StatusBody(403, "Forbidden", "no list"), "application/json");
    });
    fake_.server().Get("/api/v1/namespaces/ns/secrets/([^/]+)", [this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      secret_gets_.push_back(req.matches[1]);
      for (const json& s : children_["secrets"]) {
        if (s["metadata"].value("name", "") == req.matches[1].str()) {
          res.set_content(s.dump(), "application/json");
          return;
        }
      }
      res.status = 404;
      res.set_content(kube::testing::StatusBody(404, "NotFound", "no secret"), "application/json");
    });
    streams_["horovodjobs"] = std::make_unique<FakeWatchStream>(fake_);
    fake_.server().Get(kJobs, [this](const httplib::Request& req, httplib::Response& res) {
      ServeList("horovodjobs", req, res);
    });
    fake_.server().Get(std::string(kJobs) + "/j",
                       [this](const httplib::Request&, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu_);
                         res.set_content(job_.dump(), "application/json");
                       });
    // The status is written as a merge patch; statuses_ keeps each resulting status whole.
    fake_.server().Patch(std::string(kJobs) + "/j/status",
                         [this](const httplib::Request& req, httplib::Response& res) {
                           std::lock_guard<std::mutex> lock(mu_);
                           const json body = json::parse(req.body);
                           if (!job_.contains("status")) job_["status"] = json::object();
                           job_["status"].merge_patch(body.value("status", json::object()));
                           statuses_.push_back(job_["status"]);
                           res.set_content(job_.dump(), "application/json");
                         });
    fake_.server().Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      posts_.push_back(req.path);
      res.status = 201;
      res.set_content(req.body, "application/json");
    });
    fake_.server().Delete(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      deletes_.push_back(req.path);
      res.set_content("{}", "application/json");
    });
    fake_.Start();
    client_ = fake_.Client();
  }
  ~FakeNamespace() {
    for (auto& [name, stream] : streams_) stream->Shutdown();
  }

  const kube::ApiClient& client() const { return *client_; }
  std::vector<json> statuses() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
  }
  int PostsTo(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(std::count(posts_.begin(), posts_.end(), path));
  }
  std::vector<std::string> deletes() {
    std::lock_guard<std::mutex> lock(mu_);
    return deletes_;
  }
  std::vector<std::string> secret_gets() {
    std::lock_guard<std::mutex> lock(mu_);
    return secret_gets_;
  }
  std::vector<std::string> secret_lists() {
    std::lock_guard<std::mutex> lock(mu_);
    return secret_lists_;
  }

 private:
  void ServeList(const std::string& resource, const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("watch")) {
      streams_.at(resource)->Serve(req, res);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    json list = {{"metadata", {{"resourceVersion", "1"}}}, {"items", json::array()}};
    if (resource == "horovodjobs") {
      list["items"].push_back(job_);
    } else {
      for (const json& child : children_[resource]) list["items"].push_back(child);
    }
    res.set_content(list.dump(), "application/json");
  }

  std::map<std::string, std::unique_ptr<FakeWatchStream>> streams_;
  std::unique_ptr<kube::ApiClient> client_;
  std::mutex mu_;
  json job_;
  std::map<std::string, std::vector<json>> children_;
  std::vector<json> statuses_;
  std::vector<std::string> posts_;
  std::vector<std::string> deletes_;
  std::vector<std::string> secret_gets_;
  std::vector<std::string> secret_lists_;
  // Last, so it is destroyed first: the server stops and joins its threads (which may still be
  // inside a handler or Serve) before what they use goes away.
  FakeApiServer fake_;
};

// Runs a controller over `ns` until its first status write, then `then` (more waits and checks
// while it still runs), then stops it.
void RunUntilFirstStatus(
    FakeNamespace& ns, const std::function<void()>& then = [] {}) {
  auto registry = std::make_unique<http::MetricsRegistry>();
  auto metrics = OperatorMetrics::Create(*registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status().ToString();
  kube::EventRecorder events(ns.client(), "korovod-operator");
  JobControllerOptions options;
  options.namespace_name = "ns";
  options.workers = 1;
  JobController controller(ns.client(), events, **metrics, options);
  controller.StartInformers();
  ASSERT_TRUE(Eventually([&] { return controller.Synced(); }));
  controller.StartWorkers();
  ASSERT_TRUE(Eventually([&] { return !ns.statuses().empty(); }));
  then();
  controller.Stop();
}

TEST(JobController, RecreatedJobDoesNotAdoptThePodsOfItsNamesake) {
  // Job "j" with uid A ran to completion; its pods (and other children) are still there, e.g.
  // terminating or awaiting the garbage collector, when "j" is deleted and created again.
  json old_job = testing::MinimalJob(2);
  old_job["metadata"]["uid"] = "uid-a";
  testing::FakeCluster old_cluster(old_job);
  old_cluster.Settle(kT0);
  old_cluster.SetTrainerExit("j-worker-0", 0, "Completed");
  old_cluster.SetTrainerExit("j-worker-1", 0, "Completed");
  old_cluster.SetAllPodsPhase("Succeeded");
  old_cluster.Step(kT0 + 1);
  ASSERT_EQ(old_cluster.status().value("phase", ""), "Succeeded");

  json new_job = testing::MinimalJob(2);
  new_job["metadata"]["uid"] = "uid-b";
  new_job["metadata"]["resourceVersion"] = "7";
  FakeNamespace ns(new_job, {{"pods", old_cluster.pods()},
                             {"services", old_cluster.services()},
                             {"configmaps", old_cluster.config_maps()},
                             {"secrets", old_cluster.secrets()}});

  RunUntilFirstStatus(ns, [&] {
    for (const json& status : ns.statuses()) {
      EXPECT_NE(status.value("phase", ""), "Succeeded")
          << "the new job reported the old job's result: " << status.dump();
      EXPECT_EQ(status.value("succeededWorkers", 0), 0) << status.dump();
    }
    // It creates its own workers (the API server would answer AlreadyExists while the old ones
    // terminate; their deletion brings the job back), and leaves the old ones to the collector.
    EXPECT_TRUE(Eventually([&] { return ns.PostsTo("/api/v1/namespaces/ns/pods") == 2; }))
        << "pods created: " << ns.PostsTo("/api/v1/namespaces/ns/pods");
    EXPECT_TRUE(ns.deletes().empty()) << ns.deletes().front();
    // The namesake's key Secret is not this job's: read by name, then a new one is created.
    EXPECT_TRUE(Eventually([&] { return ns.PostsTo("/api/v1/namespaces/ns/secrets") >= 1; }));
    EXPECT_TRUE(ns.secret_lists().empty()) << ns.secret_lists().front();
  });
}

TEST(JobController, ReadsTheKeySecretByNameAndNeverListsOrWatchesSecrets) {
  // The key Secret exists and is the job's: read by name, not created again.
  json job = testing::MinimalJob(2);
  testing::FakeCluster existing(job);
  existing.Settle(kT0);
  ASSERT_EQ(existing.secrets().size(), 1u);
  FakeNamespace with_key(job, {{"pods", existing.pods()},
                               {"services", existing.services()},
                               {"configmaps", existing.config_maps()},
                               {"secrets", existing.secrets()}});
  RunUntilFirstStatus(with_key);
  EXPECT_EQ(with_key.PostsTo("/api/v1/namespaces/ns/secrets"), 0);
  ASSERT_FALSE(with_key.secret_gets().empty());
  EXPECT_EQ(with_key.secret_gets().front(), "j-key");
  EXPECT_TRUE(with_key.secret_lists().empty()) << with_key.secret_lists().front();

  // Absent (404 on the GET): created, once per reconcile that finds it missing.
  FakeNamespace without_key(job, {});
  RunUntilFirstStatus(without_key);
  EXPECT_GE(without_key.PostsTo("/api/v1/namespaces/ns/secrets"), 1);
  EXPECT_TRUE(without_key.secret_lists().empty()) << without_key.secret_lists().front();
}

}  // namespace
}  // namespace korovod::k8s_operator
