// EnsureCaBundle and CaBundleKeeper against the in-process fake API server: the CA goes into
// every webhook, nothing is written when all hold it, a configuration replaced without it (as
// `kubectl replace` of the chart's manifest does) gets it back within a period, and a missing
// configuration is an error naming it.
#include "operator/manager/ca_bundle_keeper.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

using kube::testing::Eventually;
using kube::testing::FakeApiServer;
using kube::testing::StatusBody;
using nlohmann::json;

constexpr char kPath[] =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/rel-korovod";
constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";

json Configuration() {
  return json::parse(R"({"metadata": {"name": "rel-korovod", "resourceVersion": "1"},
    "webhooks": [{"name": "pod.inject.korovod.dev", "clientConfig": {"service": {"name": "s"}}},
                 {"name": "namespace.inject.korovod.dev",
                  "clientConfig": {"service": {"name": "s"}}}]})");
}

class FakeConfiguration {
 public:
  FakeConfiguration() {
    fake_.server().Get(kPath, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (config_.is_null()) {
        res.status = 404;
        res.set_content(StatusBody(404, "NotFound", "absent"), "application/json");
        return;
      }
      res.set_content(config_.dump(), "application/json");
    });
    fake_.server().Put(kPath, [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++puts_;
      config_ = json::parse(req.body);
      res.set_content(config_.dump(), "application/json");
    });
    fake_.Start();
    client_ = fake_.Client();
  }
  const kube::ApiClient& client() const { return *client_; }
  void set(json c) {
    std::lock_guard<std::mutex> lock(mu_);
    config_ = std::move(c);
  }
  json get() {
    std::lock_guard<std::mutex> lock(mu_);
    return config_;
  }
  int puts() {
    std::lock_guard<std::mutex> lock(mu_);
    return puts_;
  }
  bool AllHold(const std::string& bundle) {
    const json c = get();
    if (c.is_null()) return false;
    for (const json& h : c["webhooks"]) {
      if (h["clientConfig"].value("caBundle", "") != bundle) return false;
    }
    return true;
  }

 private:
  std::mutex mu_;
  json config_;
  int puts_ = 0;
  std::unique_ptr<kube::ApiClient> client_;
  FakeApiServer fake_;  // last: stops first
};

TEST(EnsureCaBundle, SetsEveryWebhookOnceAndNamesAMissingConfiguration) {
  FakeConfiguration api;
  Status missing = EnsureCaBundle(api.client(), "rel-korovod", kCa);
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("MutatingWebhookConfiguration rel-korovod does not exist"),
            std::string::npos)
      << missing.ToString();

  api.set(Configuration());
  bool changed = false;
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, &changed).ok());
  EXPECT_TRUE(changed);
  EXPECT_TRUE(api.AllHold(Base64Encode(kCa))) << api.get().dump();
  EXPECT_EQ(api.get()["webhooks"][1]["clientConfig"]["service"]["name"], "s");
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(api.puts(), 1);
}

TEST(CaBundleKeeper, RestoresARemovedCaBundleWithinAPeriod) {
  FakeConfiguration api;
  json config = Configuration();
  for (json& h : config["webhooks"]) h["clientConfig"]["caBundle"] = Base64Encode(kCa);
  api.set(config);
  std::vector<std::string> logs;
  std::mutex logs_mu;
  {
    CaBundleKeeper keeper(api.client(), "rel-korovod", kCa, std::chrono::milliseconds(20),
                          [&](const std::string& line) {
                            std::lock_guard<std::mutex> lock(logs_mu);
                            logs.push_back(line);
                          });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(api.puts(), 0);  // it holds the CA already: nothing written
    api.set(Configuration());  // replaced by a manifest without caBundle
    EXPECT_TRUE(Eventually([&] { return api.AllHold(Base64Encode(kCa)); }));
  }
  std::lock_guard<std::mutex> lock(logs_mu);
  ASSERT_FALSE(logs.empty());
  EXPECT_NE(logs.front().find("was changed or removed: restored"), std::string::npos)
      << logs.front();
}

}  // namespace
}  // namespace korovod::k8s_operator
