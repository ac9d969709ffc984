// The webhook's own CA: a fresh set passes the check and verifies with the openssl tool the way
// the API server verifies the webhook (chain to the caBundle, server purpose, the Service's DNS
// name); the check refuses a set that names another host, expires within the renewal window, has
// a key that does not match, or a leaf of another CA, each naming the reason.
#include "operator/webhook/certificate_authority.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace korovod::k8s_operator {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;

const std::vector<std::string> kNames = {"rel-korovod-webhook.ns.svc", "rel-korovod-webhook.ns",
                                         "rel-korovod-webhook"};
constexpr auto kTenYears = std::chrono::seconds(hours(24 * 3650));
constexpr auto kNinetyDays = std::chrono::seconds(hours(24 * 90));

WebhookCertificates Issue(const std::vector<std::string>& names = kNames) {
  StatusOr<WebhookCertificates> c = IssueWebhookCertificates(names, kTenYears);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : WebhookCertificates{};
}

TEST(CertificateAuthority, FreshSetPassesAndVerifiesWithOpenssl) {
  const WebhookCertificates c = Issue();
  ASSERT_EQ(c.ca_crt.rfind("-----BEGIN CERTIFICATE-----", 0), 0u) << c.ca_crt;
  ASSERT_NE(c.tls_key.find("PRIVATE KEY"), std::string::npos);
  EXPECT_TRUE(CheckWebhookCertificates(c, kNames, std::time(nullptr), kNinetyDays).ok());

  const fs::path dir =
      fs::path(::testing::TempDir()) / ("webhook_ca_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "ca.crt") << c.ca_crt;
  std::ofstream(dir / "tls.crt") << c.tls_crt;
  const std::string verify = "openssl verify -CAfile " + (dir / "ca.crt").string() +
                             " -purpose sslserver -verify_hostname ";
  EXPECT_EQ(
      std::system((verify + kNames[0] + " " + (dir / "tls.crt").string() + " >/dev/null").c_str()),
      0);
  EXPECT_NE(
      std::system(
          (verify + "other.ns.svc " + (dir / "tls.crt").string() + " >/dev/null 2>&1").c_str()),
      0);
  fs::remove_all(dir);
}

TEST(CertificateAuthority, TwoSetsHaveDifferentKeys) { EXPECT_NE(Issue().ca_key, Issue().ca_key); }

TEST(CertificateAuthority, CheckNamesWhatIsWrong) {
  const WebhookCertificates c = Issue();
  const int64_t now = std::time(nullptr);
  Status other_host = CheckWebhookCertificates(c, {"other.ns.svc"}, now, kNinetyDays);
  EXPECT_NE(other_host.message().find("does not name other.ns.svc"), std::string::npos)
      << other_host.ToString();

  // Less than the renewal window left: 9.9 years from now.
  Status expiring = CheckWebhookCertificates(c, kNames, now + int64_t{3620} * 86400, kNinetyDays);
  EXPECT_NE(expiring.message().find("expires in"), std::string::npos) << expiring.ToString();

  WebhookCertificates swapped = c;
  swapped.tls_key = Issue().tls_key;
  Status mismatch = CheckWebhookCertificates(swapped, kNames, now, kNinetyDays);
  EXPECT_NE(mismatch.message().find("tls.key does not match tls.crt"), std::string::npos)
      << mismatch.ToString();

  const WebhookCertificates other = Issue();
  WebhookCertificates foreign = c;
  foreign.tls_crt = other.tls_crt;
  foreign.tls_key = other.tls_key;
  Status chain = CheckWebhookCertificates(foreign, kNames, now, kNinetyDays);
  EXPECT_NE(chain.message().find("does not verify against ca.crt"), std::string::npos)
      << chain.ToString();

  WebhookCertificates garbage = c;
  garbage.ca_crt = "not pem";
  Status bad = CheckWebhookCertificates(garbage, kNames, now, kNinetyDays);
  EXPECT_NE(bad.message().find("ca.crt: not a PEM certificate"), std::string::npos)
      << bad.ToString();
}

TEST(CertificateAuthority, NoNamesIsAnError) {
  EXPECT_FALSE(IssueWebhookCertificates({}, kTenYears).ok());
}

}  // namespace
}  // namespace korovod::k8s_operator
