// ApiClient's kept-alive connections, against a raw HTTP/1.1 server that counts the connections
// it accepts and can close one without answering (what a server's idle timeout does when it races
// the client's next request).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "operator/kube/api_client.h"
#include "operator/kube/resource.h"

namespace korovod::kube {
namespace {

// Answers every request {"ok":true} with keep-alive; a connection that has answered
// `answers_per_connection` requests is closed when its next request arrives, unanswered.
class RawHttpServer {
 public:
  explicit RawHttpServer(int answers_per_connection) : per_connection_(answers_per_connection) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Accept(); });
  }
  ~RawHttpServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int accepted() const { return accepted_.load(); }
  int answered() const { return answered_.load(); }
  std::vector<std::string> methods() {
    std::lock_guard<std::mutex> lock(mu_);
    return methods_;
  }

 private:
  void Accept() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++accepted_;
      connections_.emplace_back([this, c] { Serve(c); });
    }
  }
  // Reads one request (head and Content-Length body); false when the peer closed.
  static bool ReadRequest(int c, std::string& buffer, std::string& method) {
    size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
      char chunk[4096];
      const ssize_t n = ::recv(c, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    method = buffer.substr(0, buffer.find(' '));
    size_t length = 0;
    const size_t at = buffer.find("Content-Length: ");
    if (at != std::string::npos && at < end) length = std::stoul(buffer.substr(at + 16));
    while (buffer.size() < end + 4 + length) {
      char chunk[4096];
      const ssize_t n = ::recv(c, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    buffer.erase(0, end + 4 + length);
    return true;
  }
  void Serve(int c) {
    std::string buffer, method;
    for (int served = 0; ReadRequest(c, buffer, method); ++served) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        methods_.push_back(method);
      }
      if (served == per_connection_) break;  // closed under the request
      static const std::string kReply =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
          "Connection: keep-alive\r\n\r\n{\"ok\":true}";
      ++answered_;  // before the client can read the answer and check the count
      ::send(c, kReply.data(), kReply.size(), MSG_NOSIGNAL);
    }
    ::close(c);
  }

  const int per_connection_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> answered_{0};
  std::mutex mu_;
  std::vector<std::string> methods_;
  std::thread thread_;
  std::vector<std::thread> connections_;  // joined after the listener: only it appends
};

std::unique_ptr<ApiClient> ClientOf(const RawHttpServer& server, ApiClientOptions options = {}) {
  KubeConfig config;
  config.server = server.url();
  auto client = ApiClient::FromConfig(std::move(config), std::move(options));
  return client.ok() ? std::move(client).value() : nullptr;
}

TEST(ConnectionPoolTest, HundredSequentialRequestsShareOneConnection) {
  RawHttpServer server(/*answers_per_connection=*/1000);
  auto client = ClientOf(server);
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 100; ++i) {
    ApiResult r = client->Get(kPods.Path("ns", "p" + std::to_string(i)));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  EXPECT_EQ(server.answered(), 100);
  EXPECT_EQ(server.accepted(), 1);
}

TEST(ConnectionPoolTest, ConcurrentRequestsOpenAtMostOneConnectionPerThread) {
  RawHttpServer server(1000);
  ApiClientOptions options;
  options.max_idle_connections = 4;
  auto client = ClientOf(server, options);
  ASSERT_NE(client, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        if (!client->Get(kPods.Path("ns", "p")).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(server.answered(), 100);
  EXPECT_GE(server.accepted(), 1);
  EXPECT_LE(server.accepted(), 4);
}

TEST(ConnectionPoolTest, NoPoolMeansAConnectionPerRequest) {
  RawHttpServer server(1000);
  ApiClientOptions options;
  options.max_idle_connections = 0;
  auto client = ClientOf(server, options);
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(client->Get(kPods.Path("ns", "p")).ok());
  EXPECT_EQ(server.accepted(), 10);
}

TEST(ConnectionPoolTest, GetAndDeleteOnADroppedConnectionAreSentAgainOnce) {
  RawHttpServer server(/*answers_per_connection=*/1);
  auto client = ClientOf(server);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Get(kPods.Path("ns", "a")).ok());
  // The kept-alive connection is closed when the next request arrives on it: sent again.
  ApiResult get = client->Get(kPods.Path("ns", "b"));
  EXPECT_TRUE(get.ok()) << get.status().ToString();
  ApiResult del = client->Delete(kPods.Path("ns", "c"));
  EXPECT_TRUE(del.ok()) << del.status().ToString();
  EXPECT_EQ(server.answered(), 3);
  EXPECT_EQ(server.accepted(), 3);
}

TEST(ConnectionPoolTest, CreateOnADroppedConnectionIsNotSentAgain) {
  RawHttpServer server(/*answers_per_connection=*/1);
  auto client = ClientOf(server);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Get(kPods.Path("ns", "a")).ok());
  ApiResult created = client->Create(kPods.Path("ns"), nlohmann::json{{"kind", "Pod"}});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(created.status().message().find("POST " + server.url() + "/api/v1/namespaces/ns/pods"),
            std::string::npos)
      << created.status().message();
  EXPECT_EQ(server.methods(), (std::vector<std::string>{"GET", "POST"}));
  // The next request opens a new connection and succeeds.
  EXPECT_TRUE(client->Get(kPods.Path("ns", "b")).ok());
  EXPECT_EQ(server.accepted(), 2);
}

TEST(ConnectionPoolTest, AClosedWriteFenceSendsNoWriteEvenOneThatWaitedForItsToken) {
  RawHttpServer server(1000);
  std::atomic<bool> leading{true};
  std::atomic<int> waits{0};
  ApiClientOptions options;
  options.qps = 1000;
  options.burst = 1;
  // Stands for a leader paused while its writes waited for a token: the lease is lost by the
  // time the wait ends (the callback runs after it, before the fence is asked).
  options.on_rate_limit_wait = [&](std::chrono::nanoseconds) {
    if (++waits == 3) leading = false;
  };
  options.write_fence = [&]() -> Status {
    return leading ? OkStatus() : Unavailable("no longer holds the leader lease");
  };
  auto client = ClientOf(server, options);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Create(kPods.Path("ns"), nlohmann::json{{"kind", "Pod"}}).ok());
  ASSERT_TRUE(client->Get(kPods.Path("ns", "a")).ok());
  ApiResult late = client->Create(kPods.Path("ns"), nlohmann::json{{"kind", "Pod"}});
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("leader lease"), std::string::npos)
      << late.status().message();
  EXPECT_FALSE(client->Delete(kPods.Path("ns", "a")).ok());
  EXPECT_FALSE(client->Patch(kPods.Path("ns", "a"), nlohmann::json::object()).ok());
  EXPECT_TRUE(client->Get(kPods.Path("ns", "a")).ok()) << "reads are not fenced";
  EXPECT_EQ(server.methods(), (std::vector<std::string>{"POST", "GET", "GET"}));
}

}  // namespace
}  // namespace korovod::kube
