// SetUpWebhookCertificate against the in-process fake API server: an absent Secret is created and
// its CA put into every webhook's caBundle; a valid one is reused (no write at all); one for other
// names is replaced under its resourceVersion; a create lost to another replica adopts the
// winner's; a webhook configuration that appears late is waited for, and one that never appears
// ends the setup at its deadline with an error naming it.
#include "operator/manager/webhook_certificate_setup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/base64.h"
#include "operator/webhook/certificate_authority.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

namespace fs = std::filesystem;
using kube::testing::FakeApiServer;
using kube::testing::StatusBody;
using nlohmann::json;

constexpr char kSecretPath[] = "/api/v1/namespaces/sys/secrets/rel-korovod-webhook-cert";
constexpr char kConfigPath[] =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/rel-korovod";
const std::vector<std::string> kNames = {"rel-korovod-webhook.sys.svc", "rel-korovod-webhook"};

// One Secret and one MutatingWebhookConfiguration, each optional; records every write.
class FakeObjects {
 public:
  FakeObjects() {
    fake_.server().Get(kSecretPath, [this](const httplib::Request&, httplib::Response& res) {
      Serve(secret_, res);
    });
    fake_.server().Get(kConfigPath, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (config_gets_until_present_ > 0) {
        --config_gets_until_present_;
        res.status = 404;
        res.set_content(StatusBody(404, "NotFound", "not yet"), "application/json");
        return;
      }
      ServeLocked(config_, res);
    });
    fake_.server().Post("/api/v1/namespaces/sys/secrets", [this](const httplib::Request& req,
                                                                 httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      writes_.push_back("POST secret");
      if (race_create_) {
        race_create_ = false;
        secret_ = json::parse(req.body);
        secret_["data"] = winner_;
        secret_["metadata"]["resourceVersion"] = "5";
        res.status = 409;
        res.set_content(StatusBody(409, "AlreadyExists", "exists"), "application/json");
        return;
      }
      secret_ = json::parse(req.body);
      secret_["metadata"]["resourceVersion"] = "1";
      res.status = 201;
      res.set_content(secret_.dump(), "application/json");
    });
    fake_.server().Put(kSecretPath, [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      const json body = json::parse(req.body);
      writes_.push_back("PUT secret rv=" + body["metadata"].value("resourceVersion", ""));
      secret_ = body;
      res.set_content(secret_.dump(), "application/json");
    });
    fake_.server().Put(kConfigPath, [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      writes_.push_back("PUT config");
      config_ = json::parse(req.body);
      res.set_content(config_.dump(), "application/json");
    });
    fake_.Start();
    client_ = fake_.Client();
  }

  const kube::ApiClient& client() const { return *client_; }
  void set_secret(json s) { secret_ = std::move(s); }
  void set_config(json c) { config_ = std::move(c); }
  void set_config_gets_until_present(int n) { config_gets_until_present_ = n; }
  // The next create answers AlreadyExists after storing `data` as another replica's Secret.
  void RaceCreate(json data) {
    race_create_ = true;
    winner_ = std::move(data);
  }
  json secret() {
    std::lock_guard<std::mutex> lock(mu_);
    return secret_;
  }
  json config() {
    std::lock_guard<std::mutex> lock(mu_);
    return config_;
  }
  std::vector<std::string> writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  void Serve(const json& object, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    ServeLocked(object, res);
  }
  static void ServeLocked(const json& object, httplib::Response& res) {
    if (object.is_null()) {
      res.status = 404;
      res.set_content(StatusBody(404, "NotFound", "absent"), "application/json");
      return;
    }
    res.set_content(object.dump(), "application/json");
  }

  std::unique_ptr<kube::ApiClient> client_;
  std::mutex mu_;
  json secret_;
  json config_;
  json winner_;
  bool race_create_ = false;
  int config_gets_until_present_ = 0;
  std::vector<std::string> writes_;
  FakeApiServer fake_;  // last: stops first
};

json WebhookConfiguration() {
  return json::parse(R"({"apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "rel-korovod", "resourceVersion": "3"},
    "webhooks": [{"name": "pod.inject.korovod.dev", "clientConfig": {"service": {"name": "s"}}},
                 {"name": "namespace.inject.korovod.dev",
                  "clientConfig": {"service": {"name": "s"}}}]})");
}

json DataOf(const WebhookCertificates& c) {
  return {{"ca.crt", Base64Encode(c.ca_crt)},
          {"ca.key", Base64Encode(c.ca_key)},
          {"tls.crt", Base64Encode(c.tls_crt)},
          {"tls.key", Base64Encode(c.tls_key)}};
}

std::string Decoded(const json& data, const char* key) {
  StatusOr<std::string> d = Base64Decode(data.at(key).get<std::string>());
  return d.ok() ? *d : "";
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class WebhookCertificateSetupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("webhook_setup_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    options_.secret_namespace = "sys";
    options_.secret_name = "rel-korovod-webhook-cert";
    options_.webhook_configuration = "rel-korovod";
    options_.dns_names = kNames;
    options_.cert_dir = dir_.string();
    options_.timeout = std::chrono::seconds(10);
    options_.retry_period = std::chrono::milliseconds(20);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  WebhookCertificateSetupOptions options_;
};

TEST_F(WebhookCertificateSetupTest, CreatesTheSecretWritesTheFilesAndSetsEveryCaBundle) {
  FakeObjects api;
  api.set_config(WebhookConfiguration());
  StatusOr<std::string> ca = SetUpWebhookCertificate(api.client(), options_);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_EQ(api.writes(), (std::vector<std::string>{"POST secret", "PUT config"}));
  const json secret = api.secret();
  EXPECT_EQ(secret["type"], "kubernetes.io/tls");
  EXPECT_EQ(secret["metadata"]["namespace"], "sys");
  EXPECT_EQ(Decoded(secret["data"], "ca.crt"), *ca);
  EXPECT_EQ(ReadFile(dir_ / "tls.crt"), Decoded(secret["data"], "tls.crt"));
  EXPECT_EQ(ReadFile(dir_ / "tls.key"), Decoded(secret["data"], "tls.key"));
  EXPECT_EQ(fs::status(dir_ / "tls.key").permissions() & fs::perms::others_read, fs::perms::none);
  const json config = api.config();  // (a range over a temporary's member outlives it)
  for (const json& hook : config["webhooks"]) {
    EXPECT_EQ(hook["clientConfig"]["caBundle"], Base64Encode(*ca)) << hook.dump();
    EXPECT_EQ(hook["clientConfig"]["service"]["name"], "s");  // the rest is kept
  }
}

TEST_F(WebhookCertificateSetupTest, ReusesAValidSecretAndWritesNothingWhenAllAgree) {
  StatusOr<WebhookCertificates> stored =
      IssueWebhookCertificates(kNames, std::chrono::hours(24 * 3650));
  ASSERT_TRUE(stored.ok());
  FakeObjects api;
  api.set_secret({{"metadata", {{"name", "rel-korovod-webhook-cert"}, {"resourceVersion", "9"}}},
                  {"data", DataOf(*stored)}});
  json config = WebhookConfiguration();
  for (json& hook : config["webhooks"]) {
    hook["clientConfig"]["caBundle"] = Base64Encode(stored->ca_crt);
  }
  api.set_config(config);
  StatusOr<std::string> ca = SetUpWebhookCertificate(api.client(), options_);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_EQ(*ca, stored->ca_crt);  // a restart keeps the CA
  EXPECT_TRUE(api.writes().empty()) << api.writes().front();
  EXPECT_EQ(ReadFile(dir_ / "tls.crt"), stored->tls_crt);
}

TEST_F(WebhookCertificateSetupTest, ReplacesASecretForOtherNamesUnderItsResourceVersion) {
  StatusOr<WebhookCertificates> stored =
      IssueWebhookCertificates({"old.sys.svc"}, std::chrono::hours(24 * 3650));
  ASSERT_TRUE(stored.ok());
  FakeObjects api;
  api.set_secret({{"metadata", {{"name", "rel-korovod-webhook-cert"}, {"resourceVersion", "9"}}},
                  {"data", DataOf(*stored)}});
  api.set_config(WebhookConfiguration());
  StatusOr<std::string> ca = SetUpWebhookCertificate(api.client(), options_);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_NE(*ca, stored->ca_crt);
  EXPECT_EQ(api.writes(), (std::vector<std::string>{"PUT secret rv=9", "PUT config"}));
}

TEST_F(WebhookCertificateSetupTest, ACreateLostToAnotherReplicaAdoptsTheWinner) {
  StatusOr<WebhookCertificates> winner =
      IssueWebhookCertificates(kNames, std::chrono::hours(24 * 3650));
  ASSERT_TRUE(winner.ok());
  FakeObjects api;
  api.RaceCreate(DataOf(*winner));
  api.set_config(WebhookConfiguration());
  StatusOr<std::string> ca = SetUpWebhookCertificate(api.client(), options_);
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  EXPECT_EQ(*ca, winner->ca_crt);
  EXPECT_EQ(ReadFile(dir_ / "tls.key"), winner->tls_key);
}

TEST_F(WebhookCertificateSetupTest, WaitsForALateWebhookConfigurationAndGivesUpAtTheDeadline) {
  {
    FakeObjects api;
    api.set_config(WebhookConfiguration());
    api.set_config_gets_until_present(3);
    StatusOr<std::string> ca = SetUpWebhookCertificate(api.client(), options_);
    ASSERT_TRUE(ca.ok()) << ca.status().ToString();
    EXPECT_EQ(api.config()["webhooks"][0]["clientConfig"]["caBundle"], Base64Encode(*ca));
  }
  FakeObjects never;
  options_.timeout = std::chrono::milliseconds(300);
  StatusOr<std::string> ca = SetUpWebhookCertificate(never.client(), options_);
  ASSERT_FALSE(ca.ok());
  EXPECT_EQ(ca.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(ca.status().message().find("MutatingWebhookConfiguration rel-korovod does not exist"),
            std::string::npos)
      << ca.status().ToString();
}

}  // namespace
}  // namespace korovod::k8s_operator
