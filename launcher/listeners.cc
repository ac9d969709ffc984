#include "launcher/listeners.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

namespace korovod::launcher {

StatusOr<Listener> BindListener(const std::string& ipv4) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(StatusCode::kUnavailable, "socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("\"" + ipv4 + "\" is not an IPv4 address");
  }
  addr.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "bind " + ipv4 + ":0", errno);
  }
  if (::listen(fd.get(), 128) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "listen on " + ipv4, errno);
  }
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "getsockname", errno);
  }
  return Listener{std::move(fd), ntohs(addr.sin_port)};
}

StatusOr<std::vector<Listener>> BindLoopbackListeners(int count) {
  std::vector<Listener> out;
  for (int i = 0; i < count; ++i) {
    KV_ASSIGN_OR_RETURN(Listener l, BindListener("127.0.0.1"));
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace korovod::launcher
