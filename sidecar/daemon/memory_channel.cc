#include "sidecar/daemon/memory_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/fd_passing.h"
#include "common/log.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;

StatusOr<Fd> Listen(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return InvalidArgument("memory channel path too long: " + path);
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return ErrnoStatus(StatusCode::kInternal, "memory channel socket", errno);
  ::unlink(path.c_str());  // a stale socket of an earlier run (the arena's lock proved it dead)
  const mode_t old_umask = ::umask(0117);
  const int rc = ::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int err = errno;
  ::umask(old_umask);
  if (rc != 0) return ErrnoStatus(StatusCode::kUnavailable, "binding " + path, err);
  ::chmod(path.c_str(), 0660);
  if (::listen(s.get(), 16) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "listening on " + path, errno);
  }
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<MemoryChannel>> MemoryChannel::Start(const std::string& path,
                                                              MemoryInbox& inbox) {
  KV_ASSIGN_OR_RETURN(Fd listener, Listen(path));
  return std::unique_ptr<MemoryChannel>(new MemoryChannel(path, std::move(listener), inbox));
}

MemoryChannel::MemoryChannel(std::string path, Fd listener, MemoryInbox& inbox)
    : path_(std::move(path)),
      listener_(std::move(listener)),
      inbox_(inbox),
      thread_([this](std::stop_token st) { Run(st); }) {}

MemoryChannel::~MemoryChannel() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void MemoryChannel::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::vector<pollfd> fds;
    fds.push_back({listener_.get(), POLLIN, 0});
    for (const Fd& c : connections_) fds.push_back({c.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;  // 100 ms: notices stop
    // Connections first (their indexes shift once one is closed), newest last.
    for (size_t i = fds.size() - 1; i >= 1; --i) {
      if (fds[i].revents == 0) continue;
      const bool keep = (fds[i].revents & POLLIN) != 0 && Serve(fds[i].fd);
      if (!keep) connections_.erase(connections_.begin() + static_cast<long>(i - 1));
    }
    if ((fds[0].revents & POLLIN) != 0) {
      Fd c(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!c.valid()) continue;
      if (connections_.size() >= kMaxConnections) {
        // The oldest is most likely a trainer of an earlier session that never closed it.
        KV_LOG(kWarning, kSidecar, "memory channel %s: %zu connections open, closing the oldest",
               path_.c_str(), connections_.size());
        connections_.erase(connections_.begin());
      }
      connections_.push_back(std::move(c));
    }
  }
}

bool MemoryChannel::Serve(int connection) {
  std::array<std::byte, kMaxMemoryFdMessageBytes + 1> buf{};
  auto got = ReceiveWithFds(connection, buf, kMaxMemoryFdsPerMessage, Deadline::After(1s));
  if (!got.ok() || got->bytes == 0) return false;  // closed or broken: its descriptors close
  Status s;
  if (got->truncated) {
    s = InvalidArgument("memory channel message truncated (more than " +
                        std::to_string(kMaxMemoryFdMessageBytes) + " bytes or " +
                        std::to_string(kMaxMemoryFdsPerMessage) + " descriptors)");
  } else {
    auto m =
        DecodeMemoryFdMessage(std::span<const std::byte>(buf.data(), got->bytes), got->fds.size());
    s = m.ok() ? inbox_.Put(*m, std::move(got->fds)) : m.status();
  }
  if (s.ok()) {
    accepted_.fetch_add(1);
  } else {
    refused_.fetch_add(1);
    KV_LOG(kWarning, kSidecar, "memory channel %s: refused a message: %s", path_.c_str(),
           s.ToString().c_str());
  }
  const MemoryFdReply reply = EncodeMemoryFdReply(s);
  const auto* p = reinterpret_cast<const std::byte*>(&reply);
  // A trainer that does not read its replies loses its connection, nothing else.
  return SendWithFds(connection, std::span<const std::byte>(p, sizeof reply), {},
                     Deadline::After(1s))
      .ok();
}

}  // namespace korovod::sidecar
