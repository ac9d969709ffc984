// MemoryChannelClient: the trainer's end of the memory channel (sidecar/arena/memory_fd_message.h):
// sends the file descriptors of device memory that has no legacy IPC handle, with the session's
// token, and waits for the sidecar's answer. One connection per session, made on first use.
#pragma once

#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/status.h"
#include "sidecar/arena/memory_fd_message.h"

namespace korovod::sidecar {

class MemoryChannelClient {
 public:
  // `path` and `token` from HelloReply (memory_socket, memory_token); an empty path: the sidecar
  // has no channel, and Send says so.
  MemoryChannelClient(std::string path, const std::string& token);

  // Sends `exports` with `fds` (borrowed; one per piece, in order), in messages of at most
  // kMaxMemoryFdsPerMessage descriptors; OK once the sidecar holds them all. Thread-safe.
  Status Send(const std::vector<MemoryExport>& exports, std::span<const int> fds,
              Deadline deadline);

 private:
  Status SendOne(const MemoryFdMessage& m, std::span<const int> fds, Deadline deadline);

  const std::string path_;
  MemoryToken token_{};
  bool token_ok_ = false;
  std::mutex mu_;
  Fd socket_;
};

}  // namespace korovod::sidecar
