// The webhook under slow clients and floods (issue 31): slowloris connections (a byte at a time,
// or headers and never the body) from one address neither starve a review from another nor stay
// open past the request deadline; 100 concurrent reviews each get their own patch; the body
// limit admits the largest review the API server can send and refuses more.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "operator/webhook/webhook_server.h"
#include "tests/operator/webhook/webhook_test_support.h"

namespace korovod::k8s_operator {
namespace {

using namespace webhook_test;  // NOLINT: the shared helpers
using Clock = std::chrono::steady_clock;

// A TCP connection to 127.0.0.1:port from `source` (another loopback address stands for another
// pod: Linux routes all of 127/8 to lo).
int ConnectFrom(const char* source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True once the server has closed `fd` (EOF or reset), waiting at most `deadline`.
bool ClosedByServer(int fd, Clock::time_point deadline) {
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
  return false;
}

class WebhookFloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(TestCerts().ok()) << "openssl could not make test certificates";
    volume_.Project("a.crt", "a.key");
    WebhookServerOptions o;  // the production limits
    o.host = "127.0.0.1";
    o.port = 0;
    o.cert_dir = volume_.dir();
    o.settings.default_sidecar_image = "korovod/sidecar:test";
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      log_ += line + "\n";
    };
    auto started = WebhookServer::Start(std::move(o));
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(*started);
  }

  void TearDown() override {
    stop_trickle_ = true;
    if (trickler_.joinable()) trickler_.join();
    for (int fd : slow_) ::close(fd);
    for (SSL* ssl : slow_tls_) SSL_free(ssl);
    if (client_ctx_ != nullptr) SSL_CTX_free(client_ctx_);
  }

  // As the API server calls it: verified TLS, and its default webhook timeout (10 s) as the
  // deadline for connecting and for the answer.
  httplib::Result Post(const std::string& body) {
    httplib::SSLClient client("127.0.0.1", server_->port());
    client.set_ca_cert_path(TestCerts().path("ca.crt").c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(10, 0);
    client.set_read_timeout(10, 0);
    return client.Post("/inject", body, "application/json");
  }

  // `n` connections that send a TLS record header and then one byte a second, never finishing
  // the handshake.
  void OpenTricklers(int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = ConnectFrom("127.0.0.2", server_->port());
      if (fd < 0) break;  // refused by the server: what the cap does
      const unsigned char header[] = {0x16, 0x03, 0x01, 0x02, 0x00};  // handshake, 512 bytes
      ::send(fd, header, sizeof(header), MSG_NOSIGNAL);
      slow_.push_back(fd);
    }
    trickler_ = std::thread([this] {
      while (!stop_trickle_) {
        for (int fd : slow_) ::send(fd, "\x01", 1, MSG_NOSIGNAL);
        for (int i = 0; i < 10 && !stop_trickle_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    });
  }

  // `n` TLS connections that send a POST's headers (Content-Length 1000) and never its body.
  void OpenHeadersOnly(int n) {
    client_ctx_ = SSL_CTX_new(TLS_client_method());
    for (int i = 0; i < n; ++i) {
      const int fd = ConnectFrom("127.0.0.2", server_->port());
      if (fd < 0) break;
      SSL* ssl = SSL_new(client_ctx_);
      SSL_set_fd(ssl, fd);
      slow_.push_back(fd);
      slow_tls_.push_back(ssl);
      if (SSL_connect(ssl) != 1) continue;  // refused by the cap
      const std::string head =
          "POST /inject HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
          "Content-Length: 1000\r\n\r\n";
      SSL_write(ssl, head.data(), static_cast<int>(head.size()));
    }
  }

  std::string Log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

  SecretVolume volume_{"flood"};
  std::unique_ptr<WebhookServer> server_;
  std::mutex mu_;
  std::string log_;
  std::vector<int> slow_;
  std::vector<SSL*> slow_tls_;
  SSL_CTX* client_ctx_ = nullptr;
  std::atomic<bool> stop_trickle_{false};
  std::thread trickler_;
};

TEST_F(WebhookFloodTest, SlowClientsNeitherStarveAReviewNorStayOpen) {
  OpenHeadersOnly(50);  // first: the tricklers then fill the per-source cap
  OpenTricklers(200);
  ASSERT_GE(slow_.size(), 250u) << "the test could not open its slow connections";
  auto res = Post(Review(StatefulSetPod()).dump());
  ASSERT_TRUE(res) << "the review was not answered within the API server's 10 s: "
                   << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["response"]["patchType"], "JSONPatch") << res->body;
  // Every slow connection is closed by the server: refused at once (over the per-source cap) or
  // cut at the request deadline (10 s), well before 20 s.
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  size_t still_open = 0;
  for (int fd : slow_) still_open += ClosedByServer(fd, deadline) ? 0 : 1;
  EXPECT_EQ(still_open, 0u) << "slow connections still open 20 s later";
  EXPECT_NE(Log().find("did not send a whole request within 10000 ms: 127.0.0.2"),
            std::string::npos)
      << Log();
  EXPECT_NE(Log().find("refused connections over the limit of 128 per address: 127.0.0.2"),
            std::string::npos)
      << Log();
}

TEST_F(WebhookFloodTest, HundredConcurrentReviewsEachGetTheirOwnPatch) {
  constexpr int kReviews = 100;
  std::vector<std::string> answers(kReviews);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kReviews; ++i) {
    threads.emplace_back([&, i] {
      json pod = StatefulSetPod();
      pod["metadata"]["name"] = "bert-" + std::to_string(i);
      pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = std::to_string(i);
      pod["metadata"]["annotations"]["korovod.dev/world-size"] = std::to_string(kReviews);
      json review = Review(pod);
      review["request"]["uid"] = "uid-" + std::to_string(i);
      const std::string body = review.dump();
      ++ready;
      while (ready < kReviews) std::this_thread::yield();  // all at once
      auto res = Post(body);
      if (!res) {
        answers[i] = "no answer: " + httplib::to_string(res.error());
      } else if (res->status != 200) {
        answers[i] = "HTTP " + std::to_string(res->status) + ": " + res->body;
      } else {
        json reply = json::parse(res->body, nullptr, false);
        json patch = json::parse(Unbase64(reply["response"].value("patch", "")), nullptr, false);
        json patched = pod.patch(patch);
        std::string rank;
        for (const json& e : patched["spec"]["containers"][0]["env"]) {
          if (e["name"] == "KOROVOD_RANK") rank = e["value"];
        }
        answers[i] = reply["response"]["uid"].get<std::string>() + " rank " + rank;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kReviews; ++i) {
    EXPECT_EQ(answers[i], "uid-" + std::to_string(i) + " rank " + std::to_string(i));
  }
  if (::testing::Test::HasFailure()) ADD_FAILURE() << "server log:\n" << Log();
}

TEST_F(WebhookFloodTest, TheBodyLimitFitsTheLargestReviewTheApiServerSends) {
  // The API server takes request bodies up to 3 MiB: a pod that large, in its review, is
  // answered; a body over 4 MiB cannot come from it and is refused before it is parsed.
  json pod = StatefulSetPod();
  pod["metadata"]["annotations"]["bulk"] = std::string(3u << 20, 'x');
  auto large = Post(Review(pod).dump());
  ASSERT_TRUE(large) << httplib::to_string(large.error());
  EXPECT_EQ(large->status, 200) << large->body.substr(0, 200);
  pod["metadata"]["annotations"]["bulk"] = std::string((4u << 20) + 1, 'x');
  auto too_large = Post(Review(pod).dump());
  ASSERT_TRUE(too_large) << httplib::to_string(too_large.error());
  EXPECT_EQ(too_large->status, 413);
  EXPECT_NE(too_large->body.find("4194304"), std::string::npos) << too_large->body;
}

TEST_F(WebhookFloodTest, LargeBodiesSentSlowlyAreRefusedPastTheMemoryBudget) {
  // 20 connections from one address each announce a body just under the 4 MiB limit and never
  // send it: without a budget the server would hold a buffer for each (256 of them: 1 GiB).
  // Two fit in one address's share (8 MiB); the others are answered 503 before any body is read,
  // and a review from another address is still answered.
  client_ctx_ = SSL_CTX_new(TLS_client_method());
  const std::string head =
      "POST /inject HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string((4u << 20) - 1) + "\r\n\r\n";
  for (int i = 0; i < 20; ++i) {
    const int fd = ConnectFrom("127.0.0.2", server_->port());
    ASSERT_GE(fd, 0);
    timeval wait{3, 0};  // a held connection answers nothing: give up on it after 3 s
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    SSL* ssl = SSL_new(client_ctx_);
    SSL_set_fd(ssl, fd);
    slow_.push_back(fd);
    slow_tls_.push_back(ssl);
    ASSERT_EQ(SSL_connect(ssl), 1);
    SSL_write(ssl, head.data(), static_cast<int>(head.size()));
  }
  int refused = 0;
  std::string first_refusal;
  for (SSL* ssl : slow_tls_) {
    std::string answer;
    char buf[4096];
    while (answer.find('}') == std::string::npos) {
      const int n = SSL_read(ssl, buf, sizeof(buf));
      if (n <= 0) break;
      answer.append(buf, n);
    }
    if (answer.rfind("HTTP/1.1 503", 0) == 0) {
      if (first_refusal.empty()) first_refusal = answer;
      ++refused;
    }
  }
  EXPECT_EQ(refused, 18) << first_refusal;
  EXPECT_NE(first_refusal.find("memory budget"), std::string::npos) << first_refusal;
  auto res = Post(Review(StatefulSetPod()).dump());
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
}

}  // namespace
}  // namespace korovod::k8s_operator
