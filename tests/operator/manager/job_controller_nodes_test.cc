// JobController watching every namespace: Nodes are listed and watched only while an elastic job
// exists, and the watch (with its cache) is dropped when the last one goes.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/http/metrics_registry.h"
#include "operator/manager/job_controller.h"
#include "tests/operator/controller/fake_cluster.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

using kube::testing::Eventually;
using kube::testing::FakeApiServer;
using kube::testing::FakeWatchStream;
using nlohmann::json;

class ClusterWide : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string path : {"/apis/korovod.dev/v1alpha1/horovodjobs", "/api/v1/pods",
                                   "/api/v1/services", "/api/v1/configmaps", "/api/v1/nodes"}) {
      streams_[path] = std::make_unique<FakeWatchStream>(fake_);
      fake_.server().Get(path, [this, path](const httplib::Request& req, httplib::Response& res) {
        if (req.has_param("watch")) {
          streams_.at(path)->Serve(req, res);
          return;
        }
        json list = {{"metadata", {{"resourceVersion", "1"}}}, {"items", json::array()}};
        if (path == "/api/v1/nodes") {
          std::lock_guard<std::mutex> lock(mu_);
          ++node_lists_;
          list["items"].push_back({{"metadata", {{"name", "n1"}, {"resourceVersion", "1"}}}});
        }
        res.set_content(list.dump(), "application/json");
      });
    }
    fake_.Start();
    client_ = fake_.Client();
  }
  void TearDown() override {
    for (auto& [path, stream] : streams_) stream->Shutdown();
  }
  int node_lists() {
    std::lock_guard<std::mutex> lock(mu_);
    return node_lists_;
  }
  void Push(const std::string& type, const json& job) {
    streams_.at("/apis/korovod.dev/v1alpha1/horovodjobs")->Push(type, job);
  }

  std::mutex mu_;
  int node_lists_ = 0;
  std::map<std::string, std::unique_ptr<FakeWatchStream>> streams_;
  std::unique_ptr<kube::ApiClient> client_;
  FakeApiServer fake_;  // last: stopped first
};

TEST_F(ClusterWide, NodesAreWatchedOnlyWhileAnElasticJobExists) {
  http::MetricsRegistry registry;
  auto metrics = OperatorMetrics::Create(registry);
  ASSERT_TRUE(metrics.ok());
  kube::EventRecorder events(*client_, "korovod-operator");
  JobController controller(*client_, events, **metrics, JobControllerOptions{});
  controller.StartInformers();
  ASSERT_TRUE(Eventually([&] { return controller.Synced(); }));
  EXPECT_FALSE(controller.WatchingNodes());

  json static_job = testing::MinimalJob(2);
  static_job["metadata"]["name"] = "static";
  static_job["metadata"]["resourceVersion"] = "2";
  Push("ADDED", static_job);
  json elastic = testing::MinimalJob(2);
  elastic["spec"]["elastic"] = {{"minReplicas", 1}};
  elastic["metadata"]["resourceVersion"] = "3";
  json elastic2 = elastic;
  elastic2["metadata"]["name"] = "j2";
  Push("ADDED", elastic);
  Push("ADDED", elastic2);
  ASSERT_TRUE(Eventually([&] { return controller.WatchingNodes() && node_lists() == 1; }))
      << "node lists: " << node_lists();

  Push("DELETED", elastic);  // one elastic job is left
  elastic2["metadata"]["resourceVersion"] = "5";
  Push("MODIFIED", elastic2);
  static_job["metadata"]["resourceVersion"] = "6";
  Push("MODIFIED", static_job);  // the last event: once seen, the two above were too
  ASSERT_TRUE(Eventually([&] { return controller.JobsByPhase()["Pending"] == 2; }));
  EXPECT_TRUE(controller.WatchingNodes());

  elastic2.erase("spec");  // the spec changed: no longer elastic
  elastic2["spec"] = testing::MinimalJob(2)["spec"];
  elastic2["metadata"]["resourceVersion"] = "7";
  Push("MODIFIED", elastic2);
  EXPECT_TRUE(Eventually([&] { return !controller.WatchingNodes(); }));
  EXPECT_EQ(node_lists(), 1);
  controller.Stop();
}

}  // namespace
}  // namespace korovod::k8s_operator
