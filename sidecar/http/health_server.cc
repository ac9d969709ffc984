#include "sidecar/http/health_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

namespace korovod::sidecar {

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

struct HealthServer::Impl {
  HealthServerOptions options;
  httplib::Server server;
  int port = 0;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  std::once_flag stop_once;

  std::mutex mu;  // guards ready and reason
  bool ready = false;
  std::string reason;
};

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HealthServer::~HealthServer() { Stop(); }

StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(HealthServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("health server address " + JoinHostPort(options.host, options.port) +
                           ": port out of range");
  }
  auto impl = std::make_unique<HealthServer::Impl>();
  impl->options = std::move(options);
  impl->reason = impl->options.not_ready_reason;
  Impl* s = impl.get();
  httplib::Server& srv = s->server;

  // cpp-httplib sets SO_REUSEPORT by default, which lets a second server bind a port already in
  // use. SO_REUSEADDR alone still allows a quick restart over TIME_WAIT connections.
  srv.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
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

  const std::string& host = s->options.host;
  errno = 0;
  if (s->options.port == 0) {
    s->port = srv.bind_to_any_port(host);
  } else {
    s->port = srv.bind_to_port(host, s->options.port) ? s->options.port : -1;
  }
  if (s->port <= 0) {
    int err = errno;
    std::string msg = "health server cannot listen on " + JoinHostPort(host, s->options.port);
    if (err != 0) msg += std::string(": ") + std::strerror(err);
    return Unavailable(msg);
  }
  s->thread = std::thread([s] {
    s->server.listen_after_bind();
    s->listen_returned = true;
  });
  // cpp-httplib's stop() does nothing until the listen loop has started: wait for it, so an
  // immediate Stop() cannot leave the thread running.
  while (!srv.is_running() && !s->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto server = std::make_unique<HealthServer>(std::move(impl));
  if (!server->impl_->server.is_running()) {
    std::string addr = server->address();
    server->Stop();
    return Unavailable("health server on " + addr + " stopped right after it started");
  }
  return server;
}

int HealthServer::port() const { return impl_->port; }

std::string HealthServer::address() const { return JoinHostPort(impl_->options.host, impl_->port); }

void HealthServer::SetReady(bool ready, std::string reason) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->ready = ready;
  if (!reason.empty()) impl_->reason = std::move(reason);
}

void HealthServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    impl_->server.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
  });
}

}  // namespace korovod::sidecar
