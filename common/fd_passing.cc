#include "common/fd_passing.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

namespace korovod {
namespace {

// Waits until `socket` is ready for `events` or `deadline` passes.
Status WaitFor(int socket, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{socket, events, 0};
    const int n = ::poll(&p, 1, deadline.RemainingMs());
    if (n > 0) return OkStatus();
    if (n < 0 && errno != EINTR) return ErrnoStatus(StatusCode::kInternal, what, errno);
    if (n == 0 && deadline.Expired()) {
      return DeadlineExceeded(std::string(what) + ": no progress before the deadline");
    }
  }
}

}  // namespace

Status SendWithFds(int socket, std::span<const std::byte> data, std::span<const int> fds,
                   Deadline deadline) {
  std::vector<char> control(fds.empty() ? 0 : CMSG_SPACE(fds.size() * sizeof(int)));
  iovec iov{const_cast<std::byte*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  for (;;) {
    KV_RETURN_IF_ERROR(WaitFor(socket, POLLOUT, deadline, "sending file descriptors"));
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(data.size())) return OkStatus();
    if (n >= 0) return Internal("sendmsg sent part of a datagram");
    if (errno != EINTR && errno != EAGAIN) {
      return ErrnoStatus(StatusCode::kUnavailable, "sendmsg with file descriptors", errno);
    }
  }
}

StatusOr<ReceivedDatagram> ReceiveWithFds(int socket, std::span<std::byte> buffer, size_t max_fds,
                                          Deadline deadline) {
  std::vector<char> control(CMSG_SPACE((max_fds == 0 ? 1 : max_fds) * sizeof(int)));
  for (;;) {
    KV_RETURN_IF_ERROR(WaitFor(socket, POLLIN, deadline, "receiving file descriptors"));
    iovec iov{buffer.data(), buffer.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(StatusCode::kUnavailable, "recvmsg", errno);
    }
    ReceivedDatagram r;
    r.bytes = static_cast<size_t>(n);
    r.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        r.fds.emplace_back(fd);
      }
    }
    return r;
  }
}

StatusOr<Fd> ConnectSeqPacket(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return InvalidArgument("unix socket path too long: " + path);
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid())
    return ErrnoStatus(StatusCode::kInternal, "socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "connecting to " + path, errno);
  }
  return s;
}

}  // namespace korovod
