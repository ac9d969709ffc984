// Kubeconfig and in-cluster loading, and an HTTPS round trip with CA verification, a client
// certificate and a bearer token, against certificates made with the openssl tool at test time.
#include "operator/kube/kube_config.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/base64.h"
#include "operator/kube/api_client.h"
#include "tests/operator/kube/fake_api_server.h"

namespace korovod::kube {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteAll(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A CA, a server certificate for IP 127.0.0.1 and a client certificate, shared by the suite.
class CertsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("kube_certs_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const std::string d = dir_.string();
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
    WriteAll(dir_ / "server.ext", "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n");
    WriteAll(dir_ / "client.ext", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n");
    const std::string script =
        "cd " + d + " && openssl req -x509" + ec +
        "-keyout ca.key -out ca.crt -subj /CN=kube-test-ca -days 1 && "
        "openssl req" +
        ec +
        "-keyout server.key -out server.csr -subj /CN=127.0.0.1 && "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-out server.crt -days 1 -extfile server.ext && "
        "openssl req" +
        ec +
        "-keyout client.key -out client.csr -subj /CN=kube-test-client && "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-out client.crt -days 1 -extfile client.ext";
    ok_ = std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << "openssl could not make test certificates"; }

  static fs::path dir_;
  static bool ok_;
};
fs::path CertsTest::dir_;
bool CertsTest::ok_ = false;

TEST_F(CertsTest, KubeconfigWithInlineData) {
  const std::string ca = ReadAll(dir_ / "ca.crt");
  const std::string cert = ReadAll(dir_ / "client.crt");
  const std::string key = ReadAll(dir_ / "client.key");
  const fs::path path = dir_ / "inline.kubeconfig";
  WriteAll(path,
           "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"
           "clusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:6443\n"
           "    certificate-authority-data: " +
               Base64Encode(ca) +
               "\n"
               "contexts:\n- name: dev\n  context:\n    cluster: c1\n    user: u1\n"
               "    namespace: team-a\n"
               "users:\n- name: u1\n  user:\n"
               "    client-certificate-data: " +
               Base64Encode(cert) +
               "\n"
               "    client-key-data: " +
               Base64Encode(key) +
               "\n"
               "    token: abc\n");
  auto config = LoadKubeconfig(path.string());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://127.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, ca);
  EXPECT_EQ(config->client_cert_pem, cert);
  EXPECT_EQ(config->client_key_pem, key);
  EXPECT_EQ(config->token, "abc");
  EXPECT_EQ(config->default_namespace, "team-a");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(CertsTest, KubeconfigWithRelativeFilesAndTokenFile) {
  const fs::path sub = dir_ / "cfg";
  fs::create_directories(sub / "pki");
  fs::copy_file(dir_ / "ca.crt", sub / "pki" / "ca.crt", fs::copy_options::overwrite_existing);
  WriteAll(sub / "token", "file-token\n");
  WriteAll(sub / "config",
           "current-context: a\n"
           "clusters:\n- name: c\n  cluster:\n    server: https://k:443\n"
           "    certificate-authority: pki/ca.crt\n"
           "    insecure-skip-tls-verify: true\n"
           "contexts:\n- name: a\n  context: {cluster: c, user: u}\n"
           "- name: b\n  context: {cluster: c, user: nobody}\n"
           "users:\n- name: u\n  user:\n    tokenFile: token\n");
  auto config = LoadKubeconfig((sub / "config").string());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->ca_pem, ReadAll(dir_ / "ca.crt"));
  EXPECT_EQ(config->token_file, (sub / "token").string());
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->default_namespace, "default");

  auto missing_context = LoadKubeconfig((sub / "config").string(), "prod");
  ASSERT_FALSE(missing_context.ok());
  EXPECT_NE(missing_context.status().message().find("\"prod\""), std::string::npos)
      << missing_context.status().message();
  EXPECT_NE(missing_context.status().message().find((sub / "config").string()), std::string::npos);

  auto missing_user = LoadKubeconfig((sub / "config").string(), "b");
  ASSERT_FALSE(missing_user.ok());
  EXPECT_NE(missing_user.status().message().find("\"nobody\""), std::string::npos)
      << missing_user.status().message();

  auto no_file = LoadKubeconfig((dir_ / "absent").string());
  ASSERT_FALSE(no_file.ok());
  EXPECT_NE(no_file.status().message().find("absent"), std::string::npos);

  WriteAll(sub / "broken", "clusters: [unclosed\n");
  auto broken = LoadKubeconfig((sub / "broken").string());
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("broken"), std::string::npos);
}

TEST_F(CertsTest, InClusterConfig) {
  const fs::path sa = dir_ / "sa";
  fs::create_directories(sa);
  WriteAll(sa / "token", "sa-token");
  fs::copy_file(dir_ / "ca.crt", sa / "ca.crt", fs::copy_options::overwrite_existing);
  WriteAll(sa / "namespace", "jobs\n");
  ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = LoadInClusterConfig(sa.string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->server, "https://10.0.0.1:443");
  EXPECT_EQ(config->token_file, (sa / "token").string());
  EXPECT_EQ(config->default_namespace, "jobs");
  auto outside = LoadInClusterConfig(sa.string());
  EXPECT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("KUBERNETES_SERVICE_HOST"), std::string::npos);
}

TEST_F(CertsTest, HttpsWithCaClientCertificateAndToken) {
  const std::string d = dir_.string();
  httplib::SSLServer server((d + "/server.crt").c_str(), (d + "/server.key").c_str(),
                            (d + "/ca.crt").c_str());
  ASSERT_TRUE(server.is_valid());
  server.Get("/api/v1/namespaces/ns/pods/p", [](const httplib::Request& req,
                                                httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer secret") {
      res.status = 401;
      res.set_content(testing::StatusBody(401, "Unauthorized", "bad token"), "application/json");
      return;
    }
    res.set_content(R"({"kind":"Pod","metadata":{"name":"p"}})", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  ASSERT_TRUE(testing::Eventually([&] { return server.is_running(); }));

  KubeConfig config;
  config.server = "https://127.0.0.1:" + std::to_string(port);
  config.ca_pem = ReadAll(dir_ / "ca.crt");
  config.client_cert_pem = ReadAll(dir_ / "client.crt");
  config.client_key_pem = ReadAll(dir_ / "client.key");
  config.token = "secret";
  auto client = ApiClient::FromConfig(config);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ApiResult pod = client.value()->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_TRUE(pod.ok()) << pod.status().ToString();
  if (pod.ok()) {
    EXPECT_EQ(pod.value()["metadata"]["name"], "p");
  }

  KubeConfig wrong_token = config;
  wrong_token.token = "nope";
  ApiResult unauthorized =
      ApiClient::FromConfig(wrong_token).value()->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(unauthorized.http_code(), 401);
  EXPECT_EQ(unauthorized.status().code(), StatusCode::kPermissionDenied);

  // Without the client certificate the server refuses the handshake.
  KubeConfig no_cert = config;
  no_cert.client_cert_pem.clear();
  no_cert.client_key_pem.clear();
  ApiResult refused = ApiClient::FromConfig(no_cert).value()->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.http_code(), 0);

  // A CA that did not sign the server's certificate fails verification, naming why.
  KubeConfig wrong_ca = config;
  wrong_ca.ca_pem = config.client_cert_pem;
  ApiResult unverified =
      ApiClient::FromConfig(wrong_ca).value()->Get("/api/v1/namespaces/ns/pods/p");
  EXPECT_FALSE(unverified.ok());
  EXPECT_NE(unverified.status().message().find(config.server), std::string::npos)
      << unverified.status().message();

  server.stop();
  thread.join();
}

TEST_F(CertsTest, MismatchedClientKeyIsRejected) {
  KubeConfig config;
  config.server = "https://127.0.0.1:1";
  config.client_cert_pem = ReadAll(dir_ / "client.crt");
  config.client_key_pem = ReadAll(dir_ / "server.key");
  auto client = ApiClient::FromConfig(config);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("does not match"), std::string::npos);
}

// The codec itself is tested in tests/common/base64_test.cc; here, that a bad "-data" field is
// named in the kubeconfig's error.
TEST(KubeconfigTest, BadBase64DataNamesTheField) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("bad_data_" + std::to_string(::getpid()) + ".kubeconfig");
  WriteAll(path,
           "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"
           "clusters:\n- name: c1\n  cluster:\n    server: https://127.0.0.1:6443\n"
           "contexts:\n- name: dev\n  context:\n    cluster: c1\n    user: u1\n"
           "users:\n- name: u1\n  user:\n    client-key-data: abc\n");
  auto config = LoadKubeconfig(path.string());
  fs::remove(path);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("client-key-data"), std::string::npos)
      << config.status().ToString();
  EXPECT_NE(config.status().message().find("not valid base64"), std::string::npos)
      << config.status().ToString();
}

}  // namespace
}  // namespace korovod::kube
