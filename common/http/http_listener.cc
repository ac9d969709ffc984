#include "common/http/http_listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

namespace korovod::http {

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(httplib::Server& server,
                                                            std::string host, int port,
                                                            std::string_view what) {
  if (port < 0 || port > 65535) {
    return InvalidArgument(std::string(what) + " address " + JoinHostPort(host, port) +
                           ": port out of range");
  }
  // cpp-httplib sets SO_REUSEPORT by default, which lets a second server bind a port already in
  // use. SO_REUSEADDR alone still allows a quick restart over TIME_WAIT connections.
  auto listening = std::make_shared<int>(-1);
  server.set_socket_options([listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listening = sock;
  });
  errno = 0;
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    const int err = errno;
    std::string msg = std::string(what) + " cannot listen on " + JoinHostPort(host, port);
    if (err != 0) msg += std::string(": ") + std::strerror(err);
    return Unavailable(msg);
  }
  // cpp-httplib listens with a backlog of 5: while its accept loop is busy (a flood of
  // connections, a loaded node), the kernel then drops further SYNs and a real client's connect
  // waits out SYN retransmissions (1 s, 3 s, 7 s: past the API server's 10 s webhook timeout).
  // listen() again on the bound socket only raises the backlog.
  if (*listening >= 0) ::listen(*listening, SOMAXCONN);
  auto listener = std::make_unique<HttpListener>(server, std::move(host), bound);
  HttpListener* l = listener.get();
  l->thread_ = std::thread([l] {
    l->server_.listen_after_bind();
    l->listen_returned_ = true;
  });
  // cpp-httplib's stop() does nothing until the listen loop has started: wait for it, so an
  // immediate Stop() cannot leave the thread running.
  while (!server.is_running() && !l->listen_returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!server.is_running()) {
    const std::string addr = listener->address();
    listener->Stop();
    return Unavailable(std::string(what) + " on " + addr + " stopped right after it started");
  }
  return listener;
}

HttpListener::~HttpListener() { Stop(); }

void HttpListener::Stop() {
  std::call_once(stop_once_, [this] {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  });
}

}  // namespace korovod::http
