#include "sidecar/launcher/listeners.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

namespace korovod::launcher {

StatusOr<std::vector<Listener>> BindLoopbackListeners(int count) {
  std::vector<Listener> out;
  for (int i = 0; i < count; ++i) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoStatus(StatusCode::kUnavailable, "socket", errno);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      return ErrnoStatus(StatusCode::kUnavailable, "bind 127.0.0.1:0", errno);
    }
    if (::listen(fd.get(), 128) != 0) {
      return ErrnoStatus(StatusCode::kUnavailable, "listen on 127.0.0.1", errno);
    }
    socklen_t len = sizeof addr;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return ErrnoStatus(StatusCode::kUnavailable, "getsockname", errno);
    }
    out.push_back({std::move(fd), ntohs(addr.sin_port)});
  }
  return out;
}

}  // namespace korovod::launcher
