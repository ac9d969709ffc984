#include "common/http/health_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>

namespace korovod::http {
namespace {

std::unique_ptr<HealthServer> StartOrDie(HealthServerOptions options) {
  auto s = HealthServer::Start(std::move(options));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

HealthServerOptions Loopback(int port = 0) {
  HealthServerOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  return o;
}

TEST(HealthServerTest, EndpointsOnEphemeralPort) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry.GetCounter("korovod_test_total", "Test.").ok());
  std::atomic<int> scrapes{0};
  HealthServerOptions o = Loopback();
  o.registry = &registry;
  o.before_scrape = [&] { ++scrapes; };
  o.not_ready_reason = "waiting for rendezvous";
  auto server = StartOrDie(o);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));

  httplib::Client client("127.0.0.1", server->port());
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  auto not_ready = client.Get("/readyz");
  ASSERT_TRUE(not_ready);
  EXPECT_EQ(not_ready->status, 503);
  EXPECT_EQ(not_ready->body, "not ready: waiting for rendezvous\n");

  server->SetReady(true);
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  EXPECT_EQ(ready->body, "ok\n");

  server->SetReady(false, "engine stopped: rank 3 is gone");
  auto unready = client.Get("/readyz");
  ASSERT_TRUE(unready);
  EXPECT_EQ(unready->status, 503);
  EXPECT_EQ(unready->body, "not ready: engine stopped: rank 3 is gone\n");

  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics->body.find("# TYPE korovod_test_total counter\nkorovod_test_total 0\n"),
            std::string::npos)
      << metrics->body;
  EXPECT_EQ(scrapes.load(), 1);

  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = client.Post("/healthz", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);
}

TEST(HealthServerTest, PortInUseIsAnErrorNamingTheAddress) {
  auto first = StartOrDie(Loopback());
  ASSERT_NE(first, nullptr);
  auto second = HealthServer::Start(Loopback(first->port()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port())),
            std::string::npos)
      << second.status().message();
}

TEST(HealthServerTest, BadAddressesAreErrors) {
  HealthServerOptions bad_port = Loopback(70000);
  auto a = HealthServer::Start(bad_port);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("127.0.0.1:70000"), std::string::npos);
  HealthServerOptions not_local = Loopback();
  not_local.host = "192.0.2.1";  // TEST-NET-1: not an address of this host
  auto b = HealthServer::Start(not_local);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("192.0.2.1:0"), std::string::npos) << b.status().message();
}

TEST(HealthServerTest, StopReleasesThePortAndIsIdempotent) {
  auto first = StartOrDie(Loopback());
  ASSERT_NE(first, nullptr);
  int port = first->port();
  {
    // A client asking for keep-alive must not hold Stop for the keep-alive timeout.
    httplib::Client client("127.0.0.1", port);
    client.set_keep_alive(true);
    ASSERT_TRUE(client.Get("/healthz"));
    auto start = std::chrono::steady_clock::now();
    first->Stop();
    first->Stop();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  }
  first.reset();
  auto again = StartOrDie(Loopback(port));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->port(), port);
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(HealthServerTest, ImmediateStopDoesNotHang) {
  for (int i = 0; i < 20; ++i) {
    auto s = StartOrDie(Loopback());
    ASSERT_NE(s, nullptr);
  }
}

TEST(HealthServerTest, JoinHostPortBracketsIpv6) {
  EXPECT_EQ(JoinHostPort("::1", 9090), "[::1]:9090");
  EXPECT_EQ(JoinHostPort("localhost", 80), "localhost:80");
}

}  // namespace
}  // namespace korovod::http
