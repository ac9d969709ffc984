#include "runtime/transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/transport/address_text.h"

namespace korovod {

namespace {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  // "ip:port", as SocketIp(fd, false) and the port name a connected socket's remote end.
  std::string ToString() const { return AddressText(ss).first; }
};

// Every address `host` resolves to (a headless Service: one per pod behind it).
StatusOr<std::vector<SockAddr>> ResolveAll(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    return Unavailable("cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  std::vector<SockAddr> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    SockAddr s;
    std::memcpy(&s.ss, a->ai_addr, a->ai_addrlen);
    s.len = a->ai_addrlen;
    out.push_back(s);
  }
  ::freeaddrinfo(res);
  return out;
}

// The first address `host` resolves to.
StatusOr<SockAddr> Resolve(const std::string& host, uint16_t port) {
  KV_ASSIGN_OR_RETURN(std::vector<SockAddr> all, ResolveAll(host, port));
  return all.front();  // getaddrinfo succeeds with at least one
}

// socket(2) failed because this process (or the machine) is out of descriptors: waiting for
// the peer does not help, so the dialers fail at once, saying the limit.
bool OutOfDescriptors(int err) { return err == EMFILE || err == ENFILE; }
Status OutOfDescriptorsError(const std::string& what, int err) {
  std::string m = what + ": " + std::strerror(err);
  rlimit nofile{};
  if (err == EMFILE && ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 &&
      nofile.rlim_cur != RLIM_INFINITY) {
    m += " (this process's descriptor limit, RLIMIT_NOFILE, is " + std::to_string(nofile.rlim_cur) +
         ")";
  }
  return FailedPrecondition(m);
}

// One non-blocking connect bounded by `deadline`: the socket, or errno in *err.
Fd TryConnect(const SockAddr& a, Deadline deadline, int* err) {
  Fd fd(::socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    *err = errno;
    return Fd();
  }
  int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.ss), a.len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd.get(), POLLOUT, 0};
    const int prc = ::poll(&p, 1, deadline.RemainingMs());
    if (prc == 1) {
      int e = 0;
      socklen_t el = sizeof e;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &e, &el);
      rc = e == 0 ? 0 : -1;
      errno = e;
    } else {
      errno = prc == 0 ? ETIMEDOUT : errno;
      rc = -1;
    }
  }
  if (rc != 0) {
    *err = errno;
    return Fd();
  }
  *err = 0;
  return fd;
}

}  // namespace

StatusOr<Fd> ListenTcp(const std::string& host, uint16_t port, int backlog) {
  KV_ASSIGN_OR_RETURN(const SockAddr a, Resolve(host, port));
  Fd fd(::socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(StatusCode::kInternal, "socket", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a.ss), a.len) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "bind " + host + ":" + std::to_string(port),
                       errno);
  }
  if (::listen(fd.get(), backlog) != 0) return ErrnoStatus(StatusCode::kInternal, "listen", errno);
  return fd;
}

StatusOr<Fd> ConnectTcp(const PeerAddress& addr, Deadline deadline) {
  KV_ASSIGN_OR_RETURN(const SockAddr a, Resolve(addr.host, addr.port));
  int backoff_ms = 5;
  int last_err = 0;
  while (true) {
    Fd fd = TryConnect(a, deadline, &last_err);
    if (fd.valid()) {
      KV_RETURN_IF_ERROR(SetNoDelay(fd.get()));
      return fd;
    }
    if (OutOfDescriptors(last_err)) {
      return OutOfDescriptorsError("cannot open a socket to " + addr.ToString(), last_err);
    }
    if (deadline.Expired()) break;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(backoff_ms, std::max(1, deadline.RemainingMs()))));
    backoff_ms = std::min(backoff_ms * 2, 200);
  }
  return DeadlineExceeded("could not connect to " + addr.ToString() + " before the deadline (" +
                          std::strerror(last_err ? last_err : ETIMEDOUT) + ")");
}

StatusOr<Fd> ConnectTcpAny(const PeerAddress& addr, Deadline deadline,
                           const std::set<std::string>& avoid) {
  int backoff_ms = 5;
  std::string last = "no address";
  while (true) {
    // Resolved again each round: the address of the pod that now listens may be new.
    auto all = ResolveAll(addr.host, addr.port);
    if (!all.ok()) last = all.status().message();
    std::vector<SockAddr> order = all.ok() ? *all : std::vector<SockAddr>{};
    if (!avoid.empty()) {
      std::stable_partition(order.begin(), order.end(),
                            [&](const SockAddr& a) { return avoid.count(a.ToString()) == 0; });
    }
    for (const SockAddr& a : order) {
      int err = 0;
      // One second per address at most, so a silent one does not hide the others.
      Fd fd = TryConnect(a, deadline.Sooner(std::chrono::milliseconds(1000)), &err);
      if (fd.valid()) {
        KV_RETURN_IF_ERROR(SetNoDelay(fd.get()));
        return fd;
      }
      if (OutOfDescriptors(err)) {
        return OutOfDescriptorsError("cannot open a socket to " + addr.ToString(), err);
      }
      last = std::string(std::strerror(err));
    }
    if (deadline.Expired()) break;
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(backoff_ms, std::max(1, deadline.RemainingMs()))));
    backoff_ms = std::min(backoff_ms * 2, 200);
  }
  return DeadlineExceeded("could not connect to any address of " + addr.ToString() +
                          " before the deadline (" + last + ")");
}

StatusOr<Fd> AcceptTcp(int listen_fd, Deadline deadline) {
  pollfd p{listen_fd, POLLIN, 0};
  int rc = ::poll(&p, 1, deadline.RemainingMs());
  if (rc == 0) return DeadlineExceeded("no connection arrived before the deadline");
  if (rc < 0) return ErrnoStatus(StatusCode::kInternal, "poll(listen)", errno);
  Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(StatusCode::kUnavailable, "accept", errno);
  KV_RETURN_IF_ERROR(SetNoDelay(fd.get()));
  return fd;
}

Status SetNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return ErrnoStatus(StatusCode::kInternal, "fcntl(F_GETFL)", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "fcntl(F_SETFL)", errno);
  }
  return OkStatus();
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "setsockopt(TCP_NODELAY)", errno);
  }
  return OkStatus();
}

Status WriteFull(int fd, const void* data, size_t len, Deadline deadline, const std::string& who) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return ErrnoStatus(StatusCode::kUnavailable, "send to " + who, errno);
    }
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, deadline.RemainingMs()) == 0) {
      return DeadlineExceeded("timed out sending to " + who);
    }
  }
  return OkStatus();
}

Status ReadFull(int fd, void* data, size_t len, Deadline deadline, const std::string& who) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Unavailable(who + " closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return ErrnoStatus(StatusCode::kUnavailable, "recv from " + who, errno);
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, deadline.RemainingMs()) == 0) {
      return DeadlineExceeded("timed out waiting for " + who);
    }
  }
  return OkStatus();
}

StatusOr<uint16_t> LocalPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "getsockname", errno);
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

std::pair<std::string, std::string> AddressText(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    port = ntohs(a->sin6_port);
  }
  return {std::string(ip) + ":" + std::to_string(port), ip};
}

std::string SocketIp(int fd, bool local) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((local ? ::getsockname(fd, sa, &len) : ::getpeername(fd, sa, &len)) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {};
  const void* addr =
      ss.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
  if (::inet_ntop(ss.ss_family, addr, buf, sizeof buf) == nullptr) return "";
  return buf;
}

}  // namespace korovod
