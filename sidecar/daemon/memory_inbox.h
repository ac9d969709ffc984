// MemoryInbox: the file descriptors of a trainer's device memory (memory_fd_message.h) that the
// memory channel received and no op has imported yet, for the current session only. Hello starts
// a session (a new random token; everything held for the previous one is closed); a message with
// another token is refused. An op's first use of an export takes its descriptors (the device
// handle cache imports them and closes them). At most kMaxHeld descriptors wait at a time, so a
// trainer that sends and never uses cannot make the sidecar run out of descriptors.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "sidecar/arena/memory_fd_message.h"

namespace korovod::sidecar {

class MemoryInbox {
 public:
  static constexpr size_t kMaxHeld = 1024;

  // A new session: a fresh token (for HelloReply.memory_token); what was held is closed.
  MemoryToken StartSession();
  // Holds `m`'s exports with `fds` (in the message's order). Refused whole (PermissionDenied) if
  // the token is not the current session's, (FailedPrecondition) past kMaxHeld or for an export id
  // already held.
  Status Put(const MemoryFdMessage& m, std::vector<Fd> fds);

  struct Export {
    std::vector<Fd> fds;
    std::vector<uint64_t> piece_bytes;
  };
  // The export's descriptors, given up by the inbox; FailedPrecondition naming the id if none is
  // held.
  StatusOr<Export> Take(uint64_t export_id);
  size_t held() const;  // descriptors

 private:
  mutable std::mutex mu_;
  MemoryToken token_{};
  bool session_ = false;
  std::map<uint64_t, Export> exports_;
  size_t held_ = 0;
};

}  // namespace korovod::sidecar
