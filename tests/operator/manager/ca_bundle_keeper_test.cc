// EnsureCaBundle and CaBundleKeeper against the in-process fake API server: the CA goes into
// every webhook, nothing is written when all hold it, a configuration replaced without it (as
// `kubectl replace` of the chart's manifest does) gets it back within a period, a missing
// configuration is an error naming it, and through a CA rotation two replicas never rewrite each
// other's caBundle: it holds both CAs until the old replica serves the new one (issue 31).
#include "operator/manager/ca_bundle_keeper.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "operator/webhook/certificate_authority.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::k8s_operator {
namespace {

using kube::testing::Eventually;
using kube::testing::FakeApiServer;
using kube::testing::StatusBody;
using nlohmann::json;

constexpr char kPath[] =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/rel-korovod";
constexpr char kSecretPath[] = "/api/v1/namespaces/sys/secrets/wh-cert";
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
      if (on_put_) on_put_(config_);
      res.set_content(config_.dump(), "application/json");
    });
    fake_.server().Get(kSecretPath, [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (secret_.is_null()) {
        res.status = 404;
        res.set_content(StatusBody(404, "NotFound", "absent"), "application/json");
        return;
      }
      res.set_content(secret_.dump(), "application/json");
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
  void set_secret(const WebhookCertificates& c) {
    std::lock_guard<std::mutex> lock(mu_);
    secret_ = {{"data",
                {{"ca.crt", Base64Encode(c.ca_crt)},
                 {"ca.key", Base64Encode(c.ca_key)},
                 {"tls.crt", Base64Encode(c.tls_crt)},
                 {"tls.key", Base64Encode(c.tls_key)}}}};
  }
  // Called with each PUT's body, under the lock (to record what was written and when).
  void on_put(std::function<void(const json&)> f) {
    std::lock_guard<std::mutex> lock(mu_);
    on_put_ = std::move(f);
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
  json secret_;
  std::function<void(const json&)> on_put_;
  int puts_ = 0;
  std::unique_ptr<kube::ApiClient> client_;
  FakeApiServer fake_;  // last: stops first
};

TEST(EnsureCaBundle, SetsEveryWebhookOnceAndNamesAMissingConfiguration) {
  FakeConfiguration api;
  Status missing = EnsureCaBundle(api.client(), "rel-korovod", kCa, false);
  EXPECT_EQ(missing.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.message().find("MutatingWebhookConfiguration rel-korovod does not exist"),
            std::string::npos)
      << missing.ToString();

  api.set(Configuration());
  bool changed = false;
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, false, &changed).ok());
  EXPECT_TRUE(changed);
  EXPECT_TRUE(api.AllHold(Base64Encode(kCa))) << api.get().dump();
  EXPECT_EQ(api.get()["webhooks"][1]["clientConfig"]["service"]["name"], "s");
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, false, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(api.puts(), 1);
}

CaBundleKeeperOptions KeeperOptions(const std::string& serving_ca, const std::string& cert_dir,
                                    std::chrono::milliseconds retire_after) {
  CaBundleKeeperOptions o;
  o.setup.secret_namespace = "sys";
  o.setup.secret_name = "wh-cert";
  o.setup.webhook_configuration = "rel-korovod";
  o.setup.dns_names = {"korovod-webhook.sys.svc"};
  o.setup.cert_dir = cert_dir;
  o.serving_ca_pem = serving_ca;
  o.period = std::chrono::milliseconds(20);
  o.retire_after = retire_after;
  return o;
}

std::vector<std::string> BundleOf(const json& config, size_t hook) {
  StatusOr<std::string> pem =
      Base64Decode(config["webhooks"][hook]["clientConfig"].value("caBundle", ""));
  return pem.ok() ? SplitPemBundle(*pem) : std::vector<std::string>{};
}

bool Holds(const std::vector<std::string>& bundle, const std::string& ca) {
  const std::vector<std::string> want = SplitPemBundle(ca);
  return !want.empty() && std::find(bundle.begin(), bundle.end(), want[0]) != bundle.end();
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(EnsureCaBundle, AddsTheCaBeforeTheOthersAndRetiresThemOnlyWhenAsked) {
  FakeConfiguration api;
  const std::string other = "-----BEGIN CERTIFICATE-----\nOLD\n-----END CERTIFICATE-----\n";
  json config = Configuration();
  for (json& h : config["webhooks"]) h["clientConfig"]["caBundle"] = Base64Encode(other);
  api.set(config);
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, false).ok());
  EXPECT_EQ(BundleOf(api.get(), 0), (std::vector<std::string>{kCa, other}));
  bool changed = false;
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, false, &changed).ok());
  EXPECT_FALSE(changed);
  ASSERT_TRUE(EnsureCaBundle(api.client(), "rel-korovod", kCa, true, &changed).ok());
  EXPECT_TRUE(changed);
  EXPECT_EQ(BundleOf(api.get(), 1), (std::vector<std::string>{kCa}));
}

TEST(CaBundleKeeper, RestoresARemovedCaBundleWithinAPeriod) {
  FakeConfiguration api;  // no CA Secret: the keeper keeps this replica's own CA
  json config = Configuration();
  for (json& h : config["webhooks"]) h["clientConfig"]["caBundle"] = Base64Encode(kCa);
  api.set(config);
  std::vector<std::string> logs;
  std::mutex logs_mu;
  {
    CaBundleKeeper keeper(api.client(),
                          KeeperOptions(kCa, ::testing::TempDir(), std::chrono::hours(1)),
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
  std::string all;
  for (const std::string& l : logs) all += l + "\n";
  EXPECT_NE(all.find("was changed or removed: restored"), std::string::npos) << all;
  EXPECT_NE(all.find("Secret sys/wh-cert does not exist"), std::string::npos) << all;
}

// The documented rotation: the Secret was deleted and a new replica (B) created a new CA and
// added it to the caBundle; the old replica (A) still serves a certificate of the old CA. Both
// keepers run: A switches to the new certificate once the caBundle trusts it, the old CA is
// retired only after that, and nobody writes the old CA back (before, each replica kept setting
// the caBundle to the CA it had loaded at its start, so they rewrote each other's every period).
TEST(CaBundleKeeper, ThroughARotationBothCasAreTrustedAndNoReplicaUndoesAnother) {
  const std::vector<std::string> names = {"korovod-webhook.sys.svc"};
  auto old_ca = IssueWebhookCertificates(names, std::chrono::hours(24));
  auto new_ca = IssueWebhookCertificates(names, std::chrono::hours(24));
  ASSERT_TRUE(old_ca.ok() && new_ca.ok());
  const std::filesystem::path dir_a = std::filesystem::path(::testing::TempDir()) / "keeper_a";
  const std::filesystem::path dir_b = std::filesystem::path(::testing::TempDir()) / "keeper_b";
  for (const auto& d : {dir_a, dir_b}) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
  }
  std::ofstream(dir_a / "tls.crt") << old_ca->tls_crt;
  FakeConfiguration api;
  api.set_secret(*new_ca);
  json config = Configuration();
  for (json& h : config["webhooks"]) {
    h["clientConfig"]["caBundle"] = Base64Encode(new_ca->ca_crt + old_ca->ca_crt);
  }
  api.set(config);
  // Every write: which CAs it left, and whether A served the new certificate at that moment.
  struct Write {
    bool has_old, has_new, a_switched;
  };
  std::vector<Write> writes;
  api.on_put([&](const json& c) {
    const auto bundle = BundleOf(c, 0);
    writes.push_back({Holds(bundle, old_ca->ca_crt), Holds(bundle, new_ca->ca_crt),
                      ReadFile(dir_a / "tls.crt") == new_ca->tls_crt});
  });
  std::mutex logs_mu;
  std::string logs;
  auto log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(logs_mu);
    logs += line + "\n";
  };
  {
    CaBundleKeeper a(api.client(),
                     KeeperOptions(old_ca->ca_crt, dir_a, std::chrono::milliseconds(300)), log);
    CaBundleKeeper b(api.client(),
                     KeeperOptions(new_ca->ca_crt, dir_b, std::chrono::milliseconds(300)), log);
    EXPECT_TRUE(Eventually([&] { return ReadFile(dir_a / "tls.crt") == new_ca->tls_crt; }))
        << "replica A never switched to the new certificate";
    EXPECT_EQ(ReadFile(dir_a / "tls.key"), new_ca->tls_key);
    EXPECT_TRUE(Eventually([&] {
      const auto bundle = BundleOf(api.get(), 0);
      return bundle.size() == 1 && Holds(bundle, new_ca->ca_crt);
    })) << "the old CA was never retired";
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 15 more periods each
  }
  std::lock_guard<std::mutex> lock(logs_mu);
  ASSERT_FALSE(writes.empty());
  bool retired = false;
  for (size_t i = 0; i < writes.size(); ++i) {
    SCOPED_TRACE("write " + std::to_string(i) + "\n" + logs);
    EXPECT_TRUE(writes[i].has_new) << "a write dropped the new CA";
    if (!writes[i].has_old) {
      EXPECT_TRUE(writes[i].a_switched) << "the old CA was retired while A still served it";
      retired = true;
    }
    EXPECT_FALSE(retired && writes[i].has_old) << "the old CA was written back";
  }
  EXPECT_LE(writes.size(), 2u) << "the replicas kept rewriting the caBundle";
  EXPECT_NE(logs.find("holds a new CA (rotated)"), std::string::npos) << logs;
}

}  // namespace
}  // namespace korovod::k8s_operator
