#include "common/http/health_server.h"

#include <httplib.h>

#include <mutex>

#include "common/http/http_listener.h"

namespace korovod::http {

struct HealthServer::Impl {
  HealthServerOptions options;
  httplib::Server server;
  std::unique_ptr<HttpListener> listener;

  std::mutex mu;  // guards ready and reason
  bool ready = false;
  std::string reason;
};

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HealthServer::~HealthServer() { Stop(); }

StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(HealthServerOptions options) {
  auto impl = std::make_unique<HealthServer::Impl>();
  impl->options = std::move(options);
  impl->reason = impl->options.not_ready_reason;
  Impl* s = impl.get();
  httplib::Server& srv = s->server;

  srv.set_read_timeout(5, 0);
  srv.set_write_timeout(5, 0);
  // One request per connection: probes and scrapes come seconds apart, and an idle keep-alive
  // connection would hold Stop() for cpp-httplib's keep-alive timeout.
  srv.set_keep_alive_max_count(1);

  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  srv.Get("/readyz", [s](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->ready) {
      res.set_content("ok\n", "text/plain; charset=utf-8");
    } else {
      res.status = 503;
      res.set_content("not ready: " + s->reason + "\n", "text/plain; charset=utf-8");
    }
  });
  srv.Get("/metrics", [s](const httplib::Request&, httplib::Response& res) {
    if (s->options.before_scrape) s->options.before_scrape();
    std::string body = s->options.registry != nullptr ? s->options.registry->Render() : "";
    res.set_content(body, kPrometheusContentType);
  });
  // Unmatched paths get cpp-httplib's 404; give it a body.
  srv.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404) {
      res.set_content("not found: " + req.path + "\n", "text/plain; charset=utf-8");
    }
  });

  auto listener = HttpListener::Start(srv, s->options.host, s->options.port, "health server");
  if (!listener.ok()) return listener.status();
  s->listener = std::move(*listener);
  return std::make_unique<HealthServer>(std::move(impl));
}

int HealthServer::port() const { return impl_->listener->port(); }

std::string HealthServer::address() const { return impl_->listener->address(); }

void HealthServer::SetReady(bool ready, std::string reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ready = ready;
  if (!reason.empty()) impl_->reason = std::move(reason);
}

void HealthServer::Stop() { impl_->listener->Stop(); }

}  // namespace korovod::http
