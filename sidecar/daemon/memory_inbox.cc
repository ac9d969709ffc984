#include "sidecar/daemon/memory_inbox.h"

#include <sys/random.h>

#include <cerrno>
#include <random>

namespace korovod::sidecar {

MemoryToken MemoryInbox::StartSession() {
  MemoryToken t{};
  size_t got = 0;
  while (got < t.size()) {
    // Blocks only before the kernel's pool is seeded; EINTR is retried.
    const ssize_t n = ::getrandom(t.data() + got, t.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      std::random_device rd;  // no getrandom (an old kernel or a seccomp filter)
      for (; got < t.size(); ++got) t[got] = static_cast<std::byte>(rd());
    }
  }
  std::map<uint64_t, Export> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token_ = t;
    session_ = true;
    old.swap(exports_);
    held_ = 0;
  }
  return t;  // `old` closes its descriptors outside the lock
}

Status MemoryInbox::Put(const MemoryFdMessage& m, std::vector<Fd> fds) {
  if (fds.size() != m.pieces()) {
    return InvalidArgument(std::to_string(fds.size()) + " descriptors for " +
                           std::to_string(m.pieces()) + " pieces");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_ || m.token != token_) {
    return PermissionDenied(
        "the memory channel message's token is not the current session's (a trainer from an "
        "earlier session, or a peer that did not say Hello)");
  }
  if (held_ + fds.size() > kMaxHeld) {
    return FailedPrecondition("the sidecar already holds " + std::to_string(held_) +
                              " descriptors no op has used (at most " + std::to_string(kMaxHeld) +
                              "): send an allocation's descriptors just before its first op");
  }
  for (const MemoryExport& e : m.exports) {
    if (exports_.count(e.export_id) != 0) {
      return FailedPrecondition("export id " + std::to_string(e.export_id) +
                                " is already held for this session");
    }
  }
  size_t at = 0;
  for (const MemoryExport& e : m.exports) {
    Export x;
    x.piece_bytes = e.piece_bytes;
    for (size_t i = 0; i < e.piece_bytes.size(); ++i) x.fds.push_back(std::move(fds[at++]));
    exports_.emplace(e.export_id, std::move(x));
  }
  held_ += fds.size();
  return OkStatus();
}

StatusOr<MemoryInbox::Export> MemoryInbox::Take(uint64_t export_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exports_.find(export_id);
  if (it == exports_.end()) {
    return FailedPrecondition(
        "no file descriptors were received for export id " + std::to_string(export_id) +
        " in this session (the trainer must send them on the memory channel before "
        "the op)");
  }
  Export e = std::move(it->second);
  exports_.erase(it);
  held_ -= e.fds.size();
  return e;
}

size_t MemoryInbox::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace korovod::sidecar
