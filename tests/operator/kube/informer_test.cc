// Informer against a fake API server: initial list, watch events, reconnect from the last
// resourceVersion, and a re-list after 410 that reports what changed meanwhile.
#include "operator/kube/informer.h"

#include <gtest/gtest.h>

#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

using testing::Eventually;
using testing::FakeApiServer;
using testing::FakeWatchStream;

nlohmann::json Pod(const std::string& name, const std::string& rv, const std::string& app = "x") {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name}, {"namespace", "ns"}, {"resourceVersion", rv}, {"labels", {{"app", app}}}}}};
}

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.server().Get(
        "/api/v1/namespaces/ns/pods", [this](const httplib::Request& req, httplib::Response& res) {
          if (req.has_param("watch")) {
            stream_.Serve(req, res);
            return;
          }
          std::lock_guard<std::mutex> lock(mu_);
          ++lists_;
          if (fail_lists_ > 0) {
            --fail_lists_;
            res.status = 500;
            res.set_content(testing::StatusBody(500, "InternalError", "etcd"), "application/json");
            return;
          }
          nlohmann::json list = {{"kind", "PodList"},
                                 {"apiVersion", "v1"},
                                 {"metadata", {{"resourceVersion", list_rv_}}},
                                 {"items", nlohmann::json::array()}};
          for (const auto& [name, pod] : pods_) list["items"].push_back(pod);
          res.set_content(list.dump(), "application/json");
        });
    fake_.Start();
    client_ = fake_.Client();
  }
  void TearDown() override { stream_.Shutdown(); }

  InformerHandlers Recording() {
    InformerHandlers h;
    h.on_add = [this](const nlohmann::json& o) { Note("add " + Informer::KeyOf(o)); };
    h.on_update = [this](const nlohmann::json& old_o, const nlohmann::json& new_o) {
      Note("update " + Informer::KeyOf(new_o) + " " +
           old_o["metadata"]["resourceVersion"].get<std::string>() + "->" +
           new_o["metadata"]["resourceVersion"].get<std::string>());
    };
    h.on_delete = [this](const nlohmann::json& o) { Note("delete " + Informer::KeyOf(o)); };
    h.on_error = [this](const Status& e) {
      Note(e.message().find("410") != std::string::npos ? "error 410" : "error");
    };
    return h;
  }
  void Note(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    notes_.push_back(s);
  }
  bool Noted(const std::string& s) {
    return Eventually([&] {
      std::lock_guard<std::mutex> lock(mu_);
      return std::find(notes_.begin(), notes_.end(), s) != notes_.end();
    });
  }
  std::string WatchRv(size_t i) { return stream_.requests().at(i).find("resourceVersion")->second; }

  FakeApiServer fake_;
  FakeWatchStream stream_{fake_};
  std::unique_ptr<ApiClient> client_;
  std::mutex mu_;
  std::map<std::string, nlohmann::json> pods_;
  std::string list_rv_ = "10";
  int lists_ = 0;
  int fail_lists_ = 0;
  std::vector<std::string> notes_;
};

TEST_F(InformerTest, ListWatchReconnectAndRelist) {
  pods_["a"] = Pod("a", "5");
  pods_["b"] = Pod("b", "6", "y");
  InformerOptions options;
  options.namespace_name = "ns";
  options.min_backoff = std::chrono::milliseconds(20);
  Informer informer(*client_, kPods, options, Recording());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_TRUE(informer.HasSynced());
  EXPECT_TRUE(Noted("add ns/a"));
  EXPECT_TRUE(Noted("add ns/b"));
  ASSERT_TRUE(stream_.WaitForRequests(1, std::chrono::seconds(5)));
  EXPECT_EQ(WatchRv(0), "10");
  EXPECT_EQ(stream_.requests()[0].find("allowWatchBookmarks")->second, "true");

  stream_.Push("ADDED", Pod("c", "11"));
  stream_.Push("MODIFIED", Pod("a", "12"));
  stream_.Push("BOOKMARK", {{"kind", "Pod"}, {"metadata", {{"resourceVersion", "15"}}}});
  EXPECT_TRUE(Noted("add ns/c"));
  EXPECT_TRUE(Noted("update ns/a 5->12"));
  ASSERT_TRUE(Eventually([&] { return informer.resource_version() == "15"; }));
  EXPECT_EQ(informer.Get("ns", "a").value()["metadata"]["resourceVersion"], "12");
  EXPECT_EQ(informer.List("ns", {{"app", "x"}}).size(), 2u);  // a and c
  EXPECT_EQ(informer.List("", {}).size(), 3u);
  EXPECT_FALSE(informer.Get("ns", "zzz").has_value());

  // The server closes the watch: the informer resumes from the bookmark, without a list.
  stream_.DropConnection();
  ASSERT_TRUE(stream_.WaitForRequests(2, std::chrono::seconds(5)));
  EXPECT_EQ(WatchRv(1), "15");
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(lists_, 1);
  }
  stream_.Push("DELETED", Pod("c", "16"));
  EXPECT_TRUE(Noted("delete ns/c"));

  // Meanwhile b was deleted and d created; then the watch reports 410: re-list and diff.
  {
    std::lock_guard<std::mutex> lock(mu_);
    pods_.clear();
    pods_["a"] = Pod("a", "12");
    pods_["d"] = Pod("d", "19");
    list_rv_ = "20";
  }
  stream_.Push("ERROR", {{"kind", "Status"},
                         {"code", 410},
                         {"reason", "Expired"},
                         {"message", "too old resource version: 16 (18)"}});
  EXPECT_TRUE(Noted("error 410"));  // reported to on_error, then re-listed
  EXPECT_TRUE(Noted("delete ns/b"));
  EXPECT_TRUE(Noted("add ns/d"));
  ASSERT_TRUE(stream_.WaitForRequests(3, std::chrono::seconds(5)));
  EXPECT_EQ(WatchRv(2), "20");
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(lists_, 2);
    // a kept its resourceVersion across the re-list: no spurious update.
    EXPECT_EQ(std::count(notes_.begin(), notes_.end(), "update ns/a 5->12"), 1);
    EXPECT_EQ(std::count_if(notes_.begin(), notes_.end(),
                            [](const std::string& n) { return n.rfind("update", 0) == 0; }),
              1);
  }
  EXPECT_FALSE(informer.Get("ns", "b").has_value());
  EXPECT_TRUE(informer.Get("ns", "d").has_value());

  const auto start = std::chrono::steady_clock::now();
  informer.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(InformerTest, TransformTrimsAtIngestAndManagedFieldsAlwaysGo) {
  nlohmann::json big = Pod("a", "5");
  big["metadata"]["managedFields"] = {{{"manager", "kubelet"}}};
  big["spec"] = {{"containers", {{{"name", "c"}, {"image", std::string(4096, 'x')}}}}};
  pods_["a"] = big;
  pods_["b"] = Pod("b", "6");
  pods_["b"]["metadata"]["managedFields"] = {{{"manager", "kubectl"}}};
  InformerOptions options;
  options.namespace_name = "ns";
  options.transform = [](nlohmann::json& o) { o.erase("spec"); };
  std::vector<nlohmann::json> handed;  // what the handlers were given
  InformerHandlers handlers = Recording();
  handlers.on_add = [&](const nlohmann::json& o) {
    std::lock_guard<std::mutex> lock(mu_);
    handed.push_back(o);
  };
  handlers.on_update = [&](const nlohmann::json& old_o, const nlohmann::json& new_o) {
    std::lock_guard<std::mutex> lock(mu_);
    handed.push_back(old_o);
    handed.push_back(new_o);
  };
  Informer informer(*client_, kPods, options, handlers);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  ASSERT_TRUE(stream_.WaitForRequests(1, std::chrono::seconds(5)));
  nlohmann::json modified = big;
  modified["metadata"]["resourceVersion"] = "11";
  stream_.Push("MODIFIED", modified);
  ASSERT_TRUE(Eventually([&] { return informer.resource_version() == "11"; }));
  for (const std::string name : {"a", "b"}) {
    const nlohmann::json cached = informer.Get("ns", name).value();
    EXPECT_FALSE(cached.contains("spec")) << cached.dump();
    EXPECT_FALSE(cached["metadata"].contains("managedFields")) << cached.dump();
    EXPECT_EQ(cached["metadata"]["labels"], nlohmann::json({{"app", "x"}}));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ASSERT_EQ(handed.size(), 4u);  // two adds from the list, an update's old and new
  for (const nlohmann::json& o : handed) {
    EXPECT_FALSE(o.contains("spec")) << o.dump();
    EXPECT_FALSE(o["metadata"].contains("managedFields")) << o.dump();
  }
}

TEST_F(InformerTest, WithoutATransformObjectsAreKeptWholeButManagedFields) {
  pods_["a"] = Pod("a", "5");
  pods_["a"]["spec"] = {{"nodeName", "n1"}};
  pods_["a"]["metadata"]["managedFields"] = {{{"manager", "kubelet"}}};
  InformerOptions options;
  options.namespace_name = "ns";
  Informer informer(*client_, kPods, options, Recording());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  nlohmann::json expected = Pod("a", "5");
  expected["spec"] = {{"nodeName", "n1"}};
  EXPECT_EQ(informer.Get("ns", "a").value(), expected);
}

TEST_F(InformerTest, ListErrorsBackOffThenSync) {
  fail_lists_ = 2;
  InformerOptions options;
  options.namespace_name = "ns";
  options.min_backoff = std::chrono::milliseconds(20);
  Informer informer(*client_, kPods, options, Recording());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(lists_, 3);
}

TEST_F(InformerTest, StopBeforeSyncIsPrompt) {
  fail_lists_ = 1000;
  InformerOptions options;
  options.namespace_name = "ns";
  options.min_backoff = std::chrono::seconds(10);
  Informer informer(*client_, kPods, options, Recording());
  informer.Start();
  ASSERT_TRUE(Eventually([&] { return !informer.last_error().ok(); }));
  EXPECT_NE(informer.last_error().message().find("InternalError"), std::string::npos)
      << informer.last_error().message();
  const auto start = std::chrono::steady_clock::now();
  informer.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_FALSE(informer.HasSynced());
}

}  // namespace
}  // namespace korovod::kube
