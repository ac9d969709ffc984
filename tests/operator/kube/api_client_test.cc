// ApiClient against a fake API server: error mapping, pagination, request shapes, tokens.
#include "operator/kube/api_client.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "operator/kube/query.h"
#include "operator/kube/resource.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

using testing::FakeApiServer;
using testing::StatusBody;

TEST(ResourceRefTest, Paths) {
  EXPECT_EQ(kPods.Path("ns"), "/api/v1/namespaces/ns/pods");
  EXPECT_EQ(kPods.Path("ns", "p"), "/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(kPods.Path(""), "/api/v1/pods");
  EXPECT_EQ(kLeases.Path("ns", "l"), "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l");
  const ResourceRef jobs{"korovod.io", "v1alpha1", "horovodjobs", true};
  EXPECT_EQ(jobs.Path("ns", "j", "status"),
            "/apis/korovod.io/v1alpha1/namespaces/ns/horovodjobs/j/status");
  EXPECT_EQ(kNamespaces.Path("ignored", "n"), "/api/v1/namespaces/n");
  EXPECT_EQ(jobs.ApiVersion(), "korovod.io/v1alpha1");
}

TEST(QueryTest, Escapes) {
  EXPECT_EQ(Query().Add("labelSelector", "a=b,c!=d").Add("empty", "").AppendTo("/p"),
            "/p?labelSelector=a%3Db%2Cc%21%3Dd");
  EXPECT_EQ(Query().AppendTo("/p"), "/p");
  EXPECT_EQ(Query().Add("x", "1").AppendTo("/p?y=2"), "/p?y=2&x=1");
}

class ApiClientTest : public ::testing::Test {
 protected:
  FakeApiServer fake_;
};

TEST_F(ApiClientTest, ErrorMappingNamesPathCodeAndReason) {
  fake_.server().Get("/api/v1/namespaces/ns/pods/missing", [](const httplib::Request&,
                                                              httplib::Response& res) {
    res.status = 404;
    res.set_content(StatusBody(404, "NotFound", "pods \"missing\" not found"), "application/json");
  });
  fake_.server().Post(
      "/api/v1/namespaces/ns/pods", [](const httplib::Request&, httplib::Response& res) {
        res.status = 409;
        res.set_content(StatusBody(409, "AlreadyExists", "pods \"p\" exists"), "application/json");
      });
  fake_.server().Put("/api/v1/namespaces/ns/pods/p",
                     [](const httplib::Request&, httplib::Response& res) {
                       res.status = 409;
                       res.set_content(StatusBody(409, "Conflict", "the object has been modified"),
                                       "application/json");
                     });
  fake_.server().Get(
      "/api/v1/namespaces/ns/pods/old", [](const httplib::Request&, httplib::Response& res) {
        res.status = 410;
        res.set_content(StatusBody(410, "Expired", "too old resource version"), "application/json");
      });
  fake_.server().Get("/api/v1/namespaces/ns/pods/boom",
                     [](const httplib::Request&, httplib::Response& res) {
                       res.status = 502;
                       res.set_content("bad gateway from the proxy", "text/plain");
                     });
  fake_.Start();
  auto client = fake_.Client();
  ASSERT_NE(client, nullptr);

  ApiResult missing = client->Get(kPods.Path("ns", "missing"));
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(IsNotFound(missing));
  EXPECT_FALSE(IsConflict(missing));
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = missing.status().message();
  EXPECT_NE(m.find("GET " + fake_.url() + "/api/v1/namespaces/ns/pods/missing"), std::string::npos)
      << m;
  EXPECT_NE(m.find("404"), std::string::npos) << m;
  EXPECT_NE(m.find("NotFound"), std::string::npos) << m;
  EXPECT_NE(m.find("pods \"missing\" not found"), std::string::npos) << m;

  ApiResult exists = client->Create(kPods.Path("ns"), {{"metadata", {{"name", "p"}}}});
  EXPECT_TRUE(IsAlreadyExists(exists));
  EXPECT_FALSE(IsConflict(exists));
  EXPECT_NE(exists.status().message().find("POST"), std::string::npos);

  ApiResult conflict = client->Replace(kPods.Path("ns", "p"), {{"metadata", {{"name", "p"}}}});
  EXPECT_TRUE(IsConflict(conflict));
  EXPECT_FALSE(IsAlreadyExists(conflict));
  EXPECT_EQ(conflict.status().code(), StatusCode::kAborted);

  ApiResult gone = client->Get(kPods.Path("ns", "old"));
  EXPECT_TRUE(IsGone(gone));
  EXPECT_EQ(gone.reason(), "Expired");

  ApiResult boom = client->Get(kPods.Path("ns", "boom"));
  EXPECT_EQ(boom.http_code(), 502);
  EXPECT_EQ(boom.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(boom.status().message().find("bad gateway from the proxy"), std::string::npos);
}

// ApiResult has StatusOr's shape, so the korovod macros propagate it.
Status ReadName(const ApiClient& client, const std::string& path, std::string* name) {
  KV_ASSIGN_OR_RETURN(nlohmann::json pod, client.Get(path));
  *name = pod["metadata"]["name"].get<std::string>();
  return OkStatus();
}

TEST_F(ApiClientTest, WorksWithStatusMacros) {
  fake_.server().Get("/api/v1/namespaces/ns/pods/p",
                     [](const httplib::Request&, httplib::Response& res) {
                       res.set_content(R"({"metadata":{"name":"p"}})", "application/json");
                     });
  fake_.Start();
  auto client = fake_.Client();
  std::string name;
  ASSERT_TRUE(ReadName(*client, kPods.Path("ns", "p"), &name).ok());
  EXPECT_EQ(name, "p");
  Status missing = ReadName(*client, kPods.Path("ns", "q"), &name);
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("/api/v1/namespaces/ns/pods/q"), std::string::npos);
}

TEST(ApiClientNoServerTest, ConnectionRefusedNamesServer) {
  int port;
  {
    httplib::Server probe;
    port = probe.bind_to_any_port("127.0.0.1");
  }  // closed: nothing listens there now
  KubeConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  ApiClientOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  options.connect_timeout = std::chrono::milliseconds(300);
  auto client = ApiClient::FromConfig(config, options);
  ASSERT_TRUE(client.ok());
  ApiResult r = client.value()->Get("/api/v1/pods");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.http_code(), 0);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find(config.server + "/api/v1/pods"), std::string::npos)
      << r.status().message();
}

TEST(ApiClientNoServerTest, BadServerUrl) {
  KubeConfig config;
  config.server = "ftp://example";
  auto client = ApiClient::FromConfig(config);
  EXPECT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("ftp://example"), std::string::npos);
}

TEST_F(ApiClientTest, ListFollowsContinue) {
  std::mutex mu;
  std::vector<httplib::Params> seen;
  fake_.server().Get(
      "/api/v1/namespaces/ns/pods", [&](const httplib::Request& req, httplib::Response& res) {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(req.params);
        const std::string cont = req.has_param("continue") ? req.get_param_value("continue") : "";
        nlohmann::json page = {
            {"kind", "PodList"}, {"apiVersion", "v1"}, {"items", nlohmann::json::array()}};
        if (cont.empty()) {
          page["items"].push_back({{"metadata", {{"name", "a"}}}});
          page["items"].push_back({{"metadata", {{"name", "b"}}}});
          page["metadata"] = {{"resourceVersion", "100"}, {"continue", "t1"}};
        } else if (cont == "t1") {
          page["items"].push_back({{"metadata", {{"name", "c"}}}});
          page["metadata"] = {{"resourceVersion", "100"}, {"continue", "t2"}};
        } else {
          page["items"].push_back({{"metadata", {{"name", "d"}}}});
          page["metadata"] = {{"resourceVersion", "100"}};
        }
        res.set_content(page.dump(), "application/json");
      });
  fake_.Start();
  auto client = fake_.Client();
  ListOptions options;
  options.label_selector = "app=x,tier!=db";
  options.page_size = 2;
  ApiResult list = client->List(kPods.Path("ns"), options);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list.value()["items"].size(), 4u);
  EXPECT_EQ(list.value()["items"][3]["metadata"]["name"], "d");
  EXPECT_EQ(list.value()["metadata"]["resourceVersion"], "100");
  EXPECT_EQ(list.value()["kind"], "PodList");
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].find("limit")->second, "2");
  EXPECT_EQ(seen[0].find("labelSelector")->second, "app=x,tier!=db");
  EXPECT_EQ(seen[0].count("continue"), 0u);
  EXPECT_EQ(seen[1].find("continue")->second, "t1");
  EXPECT_EQ(seen[2].find("continue")->second, "t2");
}

TEST_F(ApiClientTest, PatchAndDeleteShapes) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen;  // content type, target
  nlohmann::json delete_body;
  fake_.server().Patch("/api/v1/namespaces/ns/configmaps/c",
                       [&](const httplib::Request& req, httplib::Response& res) {
                         std::lock_guard<std::mutex> lock(mu);
                         std::string target = req.path;
                         for (const auto& [k, v] : req.params) target += " " + k + "=" + v;
                         seen.emplace_back(req.get_header_value("Content-Type"), target);
                         res.set_content(req.body, "application/json");
                       });
  fake_.server().Delete("/api/v1/namespaces/ns/configmaps/c",
                        [&](const httplib::Request& req, httplib::Response& res) {
                          std::lock_guard<std::mutex> lock(mu);
                          delete_body = nlohmann::json::parse(req.body);
                          res.set_content(StatusBody(200, "", ""), "application/json");
                        });
  fake_.Start();
  auto client = fake_.Client();
  const std::string path = kConfigMaps.Path("ns", "c");
  ASSERT_TRUE(client->Patch(path, {{"data", {{"k", "v"}}}}).ok());
  ASSERT_TRUE(
      client->Patch(path, {{"data", {{"k", "v"}}}}, {PatchType::kStrategic, "", false}).ok());
  ApiResult json_patch = client->Patch(
      path, nlohmann::json::array({{{"op", "add"}, {"path", "/data/k"}, {"value", "v"}}}),
      {PatchType::kJson, "", false});
  ASSERT_TRUE(json_patch.ok());
  EXPECT_TRUE(json_patch.value().is_array());
  ASSERT_TRUE(
      client->Patch(path, {{"data", {{"k", "v"}}}}, {PatchType::kApply, "korovod", true}).ok());
  EXPECT_FALSE(client->Patch(path, {}, {PatchType::kApply, "", false}).ok());
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].first, "application/merge-patch+json");
  EXPECT_EQ(seen[1].first, "application/strategic-merge-patch+json");
  EXPECT_EQ(seen[2].first, "application/json-patch+json");
  EXPECT_EQ(seen[3].first, "application/apply-patch+yaml");
  EXPECT_NE(seen[3].second.find("fieldManager=korovod"), std::string::npos) << seen[3].second;
  EXPECT_NE(seen[3].second.find("force=true"), std::string::npos) << seen[3].second;

  DeleteOptions del;
  del.propagation_policy = "Foreground";
  del.precondition_uid = "u-1";
  del.precondition_resource_version = "7";
  ASSERT_TRUE(client->Delete(path, del).ok());
  EXPECT_EQ(delete_body["propagationPolicy"], "Foreground");
  EXPECT_EQ(delete_body["preconditions"]["uid"], "u-1");
  EXPECT_EQ(delete_body["preconditions"]["resourceVersion"], "7");
  EXPECT_EQ(delete_body["kind"], "DeleteOptions");
}

TEST_F(ApiClientTest, BearerTokenFileIsReReadWhenRotated) {
  std::mutex mu;
  std::vector<std::string> auth;
  fake_.server().Get("/api/v1/namespaces",
                     [&](const httplib::Request& req, httplib::Response& res) {
                       std::lock_guard<std::mutex> lock(mu);
                       auth.push_back(req.get_header_value("Authorization"));
                       res.set_content("{}", "application/json");
                     });
  fake_.Start();
  const auto file = std::filesystem::path(::testing::TempDir()) / "kube_token_rotation";
  std::ofstream(file) << "first-token\n";
  KubeConfig config;
  config.token_file = file.string();
  auto client = fake_.Client(config);
  ASSERT_TRUE(client->Get("/api/v1/namespaces").ok());
  std::ofstream(file) << "second-token-longer\n";
  ASSERT_TRUE(client->Get("/api/v1/namespaces").ok());

  KubeConfig inline_token;
  inline_token.token = "inline";
  ASSERT_TRUE(fake_.Client(inline_token)->Get("/api/v1/namespaces").ok());
  ASSERT_EQ(auth.size(), 3u);
  EXPECT_EQ(auth[0], "Bearer first-token");
  EXPECT_EQ(auth[1], "Bearer second-token-longer");
  EXPECT_EQ(auth[2], "Bearer inline");
}

TEST_F(ApiClientTest, ConcurrentRequestsFromManyThreads) {
  fake_.server().Get(R"(/api/v1/namespaces/ns/pods/(\w+))", [](const httplib::Request& req,
                                                               httplib::Response& res) {
    res.set_content(nlohmann::json{{"name", req.matches[1].str()}}.dump(), "application/json");
  });
  fake_.Start();
  auto client = fake_.Client();
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string name = "p" + std::to_string(t) + "x" + std::to_string(i);
        ApiResult r = client->Get(kPods.Path("ns", name));
        if (r.ok() && r.value()["name"] == name) ++good;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 40);
}

}  // namespace
}  // namespace korovod::kube
