// HttpListener: binds a cpp-httplib server and runs its accept loop on one thread until Stop().
// Shared by the sidecar's HealthServer and the operator's webhook server, so both refuse a port
// that is already in use and both stop without leaving a thread behind.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace korovod::http {

// "host:port", or "[host]:port" for an IPv6 literal.
std::string JoinHostPort(const std::string& host, int port);

class HttpListener {
 public:
  // Binds host:port (port 0: an ephemeral one) without SO_REUSEPORT, with a listen backlog of
  // SOMAXCONN (cpp-httplib's is 5), and starts serving. `what`
  // names the server in errors ("health server", "webhook server"). `server` must outlive the
  // listener; handlers must be set before.
  static StatusOr<std::unique_ptr<HttpListener>> Start(httplib::Server& server, std::string host,
                                                       int port, std::string_view what);
  ~HttpListener();  // Stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  int port() const { return port_; }
  std::string address() const { return JoinHostPort(host_, port_); }

  // Stops accepting, finishes requests in progress and joins the thread. Idempotent.
  void Stop();

  // Use Start.
  HttpListener(httplib::Server& server, std::string host, int port)
      : server_(server), host_(std::move(host)), port_(port) {}

 private:
  httplib::Server& server_;
  std::string host_;
  int port_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  std::once_flag stop_once_;
};

}  // namespace korovod::http
