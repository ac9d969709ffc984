// The injection webhook over HTTPS: reviews answered with a certificate the client verifies,
// clear errors for bad requests, a rotated certificate served without a restart (and a
// half-written rotation ignored), and a fuzzed stream of reviews and raw bytes that the server
// survives. Certificates come from the openssl tool at test time.
#include "operator/webhook/webhook_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/base64.h"
#include "operator/webhook/sidecar_injector.h"
#include "tests/operator/webhook/webhook_test_support.h"

namespace korovod::k8s_operator {
namespace {

using namespace webhook_test;  // NOLINT: the shared helpers

namespace fs = std::filesystem;
using nlohmann::json;

// SHA-256 of a certificate, hex (what ServingCertificate::Fingerprint reports).
std::string Sha256Hex(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(cert, EVP_sha256(), md, &n);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", md[i]);
    out += hex;
  }
  return out;
}

// SHA-256 (hex) of the certificate a TLS handshake with 127.0.0.1:port presents.
std::string ServedFingerprint(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1) {
      X509* peer = SSL_get1_peer_certificate(ssl);
      out = Sha256Hex(peer);
      X509_free(peer);
      SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  ::close(fd);
  return out;
}

std::string FingerprintOf(const std::string& crt) {
  FILE* f = std::fopen(TestCerts().path(crt).c_str(), "r");
  X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  std::string out = Sha256Hex(x);
  X509_free(x);
  return out;
}

class WebhookServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(TestCerts().ok()) << "openssl could not make test certificates";
    volume_.Project("a.crt", "a.key");
  }

  void StartServer() {
    WebhookServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.cert_dir = volume_.dir();
    o.settings.default_sidecar_image = "korovod/sidecar:test";
    o.max_body_bytes = 64 * 1024;
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_ += line + "\n";
    };
    o.on_review = [this](std::string_view outcome) {
      std::lock_guard<std::mutex> lock(mu_);
      outcomes_.emplace_back(outcome);
    };
    auto started = WebhookServer::Start(std::move(o));
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(*started);
  }

  httplib::Result Post(const std::string& path, const std::string& body) {
    httplib::SSLClient client("127.0.0.1", server_->port());
    client.set_ca_cert_path(TestCerts().path("ca.crt").c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(10, 0);
    return client.Post(path.c_str(), body, "application/json");
  }

  std::string Log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

  SecretVolume volume_{"main"};
  std::unique_ptr<WebhookServer> server_;
  std::mutex mu_;
  std::string log_;
  std::vector<std::string> outcomes_;
};

TEST_F(WebhookServerTest, AnswersAReviewOverVerifiedTls) {
  StartServer();
  auto res = Post("/inject", Review(StatefulSetPod()).dump());
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  json review = json::parse(res->body);
  EXPECT_EQ(review["kind"], "AdmissionReview");
  EXPECT_EQ(review["response"]["uid"], "uid-7");
  EXPECT_EQ(review["response"]["allowed"], true);
  ASSERT_EQ(review["response"]["patchType"], "JSONPatch");
  json patch = json::parse(Unbase64(review["response"]["patch"].get<std::string>()));
  json pod = StatefulSetPod().patch(patch);
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 1u);
  EXPECT_EQ(pod["spec"]["initContainers"][0]["image"], "korovod/sidecar:test");
  EXPECT_NE(Log().find("injected: StatefulSet ml/bert rank 1 of 2"), std::string::npos) << Log();
  EXPECT_EQ(outcomes_, std::vector<std::string>{"injected"});
}

TEST_F(WebhookServerTest, BadRequestsGetClearErrorsAndTheServerStaysUp) {
  StartServer();
  auto garbage = Post("/inject", "{not json");
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->status, 400);
  EXPECT_NE(json::parse(garbage->body)["error"].get<std::string>().find("AdmissionReview"),
            std::string::npos);
  auto wrong_path = Post("/mutate", Review(StatefulSetPod()).dump());
  ASSERT_TRUE(wrong_path);
  EXPECT_EQ(wrong_path->status, 404);
  EXPECT_NE(wrong_path->body.find("POST /inject"), std::string::npos) << wrong_path->body;
  auto too_big = Post("/inject", std::string(65 * 1024, ' '));
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  EXPECT_NE(too_big->body.find("65536"), std::string::npos) << too_big->body;
  // A pod whose containers are not a list: denied with the reason, not a crash.
  json pod = StatefulSetPod();
  pod["spec"]["containers"] = "main";
  auto odd = Post("/inject", Review(pod).dump());
  ASSERT_TRUE(odd);
  ASSERT_EQ(odd->status, 200) << odd->body;
  EXPECT_EQ(json::parse(odd->body)["response"]["allowed"], false) << odd->body;
  auto fine = Post("/inject", Review(StatefulSetPod()).dump());
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);
}

TEST_F(WebhookServerTest, RotatedCertificateIsServedWithoutARestart) {
  StartServer();
  EXPECT_EQ(ServedFingerprint(server_->port()), FingerprintOf("a.crt"));
  volume_.Project("b.crt", "b.key");
  EXPECT_EQ(ServedFingerprint(server_->port()), FingerprintOf("b.crt"));
  EXPECT_NE(Log().find("webhook certificate reloaded"), std::string::npos) << Log();
  auto res = Post("/inject", Review(StatefulSetPod()).dump());  // verified against the CA
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
}

TEST_F(WebhookServerTest, AHalfWrittenRotationKeepsServingTheOldPair) {
  StartServer();
  volume_.Project("b.crt", "a.key");  // a writer that has replaced only the certificate so far
  EXPECT_EQ(ServedFingerprint(server_->port()), FingerprintOf("a.crt"));
  EXPECT_NE(Log().find("does not match the certificate"), std::string::npos) << Log();
  auto res = Post("/inject", Review(StatefulSetPod()).dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  volume_.Project("b.crt", "b.key");
  EXPECT_EQ(ServedFingerprint(server_->port()), FingerprintOf("b.crt"));
}

TEST_F(WebhookServerTest, MissingOrBadCertificateFailsAtStartNamingTheFile) {
  WebhookServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.cert_dir = (fs::path(::testing::TempDir()) / "no-such-webhook-dir").string();
  auto missing = WebhookServer::Start(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-webhook-dir/tls.crt"), std::string::npos)
      << missing.status().ToString();
  SecretVolume mismatched("mismatch");
  mismatched.Project("a.crt", "b.key");
  o.cert_dir = mismatched.dir();
  auto bad = WebhookServer::Start(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not match"), std::string::npos)
      << bad.status().ToString();
}

// Replaces the node at a random place in `doc` with a value of a random type, or removes it.
void Mutate(json& doc, std::mt19937& rng) {
  std::vector<json::json_pointer> paths;
  std::function<void(const json&, const json::json_pointer&)> walk =
      [&](const json& node, const json::json_pointer& at) {
        paths.push_back(at);
        if (node.is_object()) {
          for (auto it = node.begin(); it != node.end(); ++it) walk(it.value(), at / it.key());
        } else if (node.is_array()) {
          for (size_t i = 0; i < node.size(); ++i) walk(node[i], at / i);
        }
      };
  walk(doc, json::json_pointer());
  const json::json_pointer target = paths[rng() % paths.size()];
  if (target.empty()) return;
  static const json kValues[] = {nullptr,
                                 0,
                                 -1,
                                 1e300,
                                 "",
                                 "x",
                                 "-3",
                                 true,
                                 json::array(),
                                 json::array({1, "a"}),
                                 json::object(),
                                 json{{"name", 5}}};
  if (rng() % 5 == 0) {
    json& parent = doc[target.parent_pointer()];
    if (parent.is_object()) parent.erase(target.back());
    return;
  }
  doc[target] = kValues[rng() % std::size(kValues)];
}

// The decision function alone, many times: any reply is 200 with an AdmissionReview carrying the
// request's uid, or 400 with an error; nothing throws.
TEST(WebhookFuzzTest, MutatedReviewsAlwaysGetAnAnswer) {
  std::mt19937 rng(20261122);
  OperatorSettings settings;
  settings.default_sidecar_image = "korovod/sidecar:test";
  const json base = Review(StatefulSetPod());
  int injected = 0, denied = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    json doc = base;
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) Mutate(doc, rng);
    std::string body = doc.dump();
    if (rng() % 10 == 0) body.resize(rng() % (body.size() + 1));  // truncated
    AdmissionReply reply = ReviewPodCreation(body, settings);
    ASSERT_TRUE(reply.http_status == 200 || reply.http_status == 400) << body;
    if (reply.http_status == 400) {
      ++rejected;
      ASSERT_TRUE(reply.body.contains("error")) << body;
      continue;
    }
    ASSERT_EQ(reply.body["response"]["uid"], doc["request"]["uid"]) << body;
    if (reply.body["response"]["allowed"] == false) {
      ++denied;
      ASSERT_FALSE(reply.body["response"]["status"]["message"].get<std::string>().empty());
    } else if (reply.body["response"].contains("patch")) {
      ++injected;
      json patch = json::parse(Unbase64(reply.body["response"]["patch"].get<std::string>()));
      ASSERT_NO_THROW(doc["request"]["object"].patch(patch)) << body;
    }
  }
  // The corpus reaches every branch, so the loop above tested something.
  EXPECT_GT(injected, 1000);
  EXPECT_GT(denied, 1000);
  EXPECT_GT(rejected, 1000);
}

// Over the wire: mutated reviews and raw non-TLS bytes, then a good review still works.
TEST_F(WebhookServerTest, FuzzedTrafficLeavesTheServerServing) {
  StartServer();
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string junk(1 + rng() % 2048, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 4 == 0) junk = "POST /inject HTTP/1.1\r\nContent-Length: 99\r\n\r\n{";  // plain HTTP
    (void)!::write(fd, junk.data(), junk.size());
    ::close(fd);
  }
  for (int i = 0; i < 60; ++i) {
    json doc = Review(StatefulSetPod());
    Mutate(doc, rng);
    auto res = Post("/inject", doc.dump());
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    ASSERT_TRUE(res->status == 200 || res->status == 400) << res->status << " " << res->body;
  }
  auto res = Post("/inject", Review(StatefulSetPod()).dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["response"]["allowed"], true);
}

}  // namespace
}  // namespace korovod::k8s_operator
