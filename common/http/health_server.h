// HealthServer: the sidecar's HTTP endpoints for the kubelet and Prometheus.
//
//   GET /healthz  200 "ok" while the process runs (liveness)
//   GET /readyz   503 with the reason as text until SetReady(true), then 200 "ok" (readiness)
//   GET /metrics  the registry in the Prometheus text format 0.0.4
//   anything else 404
//
// Start binds and starts one listener thread (plus cpp-httplib's worker pool); the destructor or
// Stop() stops it and joins. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/http/http_listener.h"
#include "common/http/metrics_registry.h"

namespace korovod::http {

struct HealthServerOptions {
  std::string host = "0.0.0.0";  // address to bind: an IPv4/IPv6 literal or a resolvable name
  int port = 0;                  // 0: an ephemeral port, reported by HealthServer::port()
  // Rendered at /metrics; may be null (then /metrics serves an empty body). Must outlive the
  // server.
  const MetricsRegistry* registry = nullptr;
  // Runs before each /metrics render, on a server thread, possibly concurrently with itself (e.g.
  // EngineMetrics::UpdateFromStats, which is thread-safe).
  std::function<void()> before_scrape;
  // /readyz's body until SetReady(true).
  std::string not_ready_reason = "starting";
};

class HealthServer {
 public:
  // Binds and starts serving. An address that cannot be bound (in use, not local, bad port) fails
  // with Unavailable naming host:port. Unlike cpp-httplib's default, the socket does not set
  // SO_REUSEPORT, so a port another process listens on is an error, not a silent second listener.
  static StatusOr<std::unique_ptr<HealthServer>> Start(HealthServerOptions options);
  ~HealthServer();  // Stop()
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  int port() const;             // the bound port
  std::string address() const;  // "host:port" ("[::1]:port" for IPv6)

  // Ready: /readyz answers 200. Not ready: 503 with `reason` (or the last reason given, or the
  // option's, when empty).
  void SetReady(bool ready, std::string reason = {});

  // Stops accepting, finishes requests in progress and joins the threads. Idempotent.
  void Stop();

  struct Impl;
  explicit HealthServer(std::unique_ptr<Impl> impl);  // use Start

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace korovod::http
