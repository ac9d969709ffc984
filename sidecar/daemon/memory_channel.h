// MemoryChannel: the sidecar's end of the memory channel (sidecar/arena/memory_fd_message.h), a
// SOCK_SEQPACKET unix socket beside the gRPC one. One thread accepts up to kMaxConnections
// trainers' connections, reads one datagram at a time with its descriptors, decodes it, hands it
// to the MemoryInbox and answers with a MemoryFdReply. A datagram that is junk, truncated, has no
// or too many descriptors, or the wrong token is answered with an error naming why and its
// descriptors are closed; the connection stays usable and nothing else is affected.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "sidecar/daemon/memory_inbox.h"

namespace korovod::sidecar {

class MemoryChannel {
 public:
  static constexpr size_t kMaxConnections = 8;
  // Listens on `path` (mode 0660, never visible with another) for messages into `inbox`, which
  // must outlive the channel.
  static StatusOr<std::unique_ptr<MemoryChannel>> Start(const std::string& path,
                                                        MemoryInbox& inbox);
  ~MemoryChannel();  // stops the thread, closes the connections, unlinks the path
  MemoryChannel(const MemoryChannel&) = delete;
  MemoryChannel& operator=(const MemoryChannel&) = delete;

  uint64_t accepted() const { return accepted_.load(); }  // messages whose exports are held
  uint64_t refused() const { return refused_.load(); }    // messages answered with an error

  // The channel's path for the gRPC socket at `socket_path`.
  static std::string PathFor(const std::string& socket_path) { return socket_path + ".mem"; }

 private:
  MemoryChannel(std::string path, Fd listener, MemoryInbox& inbox);
  void Run(std::stop_token stop);
  // Serves one readable connection; false when it should be closed.
  bool Serve(int connection);

  const std::string path_;
  Fd listener_;
  MemoryInbox& inbox_;
  std::vector<Fd> connections_;  // the thread's only
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::jthread thread_;  // last: joined before the members it uses go
};

}  // namespace korovod::sidecar
