// ShmTransport: ranks on one host exchange bytes through memory-mapped rings, one per directed
// pair. The sender copies a slot into the receiver's ring; the receiver reduces or copies straight
// out of the slot. No syscall per slot on the fast path: counters are atomics in the mapping, and
// a waiting rank sleeps on a futex only after spinning and yielding (see WaitPolicy).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/transport/peer_mesh.h"
#include "runtime/transport/transport.h"
#include "common/wait_policy.h"

namespace korovod {

class RingSegment;  // one rank's segment, mapped here

class ShmTransport : public Transport {
 public:
  // Creates this rank's segment, named `name_prefix` + "<pid>-r<rank>-<random>", trades segment
  // names with every peer over the mesh, maps theirs, and unlinks its own once all peers have it
  // mapped (nothing is left in /dev/shm, even if a rank is killed later). `name_prefix`: "/" and
  // at most kMaxNamePrefixBytes - 1 more characters, no other "/".
  static StatusOr<std::unique_ptr<ShmTransport>> Create(std::shared_ptr<PeerMesh> mesh,
                                                        size_t slot_bytes, int slots,
                                                        WaitPolicy wait, Deadline deadline,
                                                        const std::string& name_prefix);
  static constexpr size_t kMaxNamePrefixBytes = 201;
  ShmTransport(std::shared_ptr<PeerMesh> mesh, size_t slot_bytes, int slots, WaitPolicy wait);
  ~ShmTransport() override;

  Status Exchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline) override;
  void Abort(const Status& why) override { mesh_->Abort(why); }
  const char* Name() const override { return "shm"; }

 private:
  Status Fail(Status s);

  std::shared_ptr<PeerMesh> mesh_;
  size_t slot_bytes_;
  uint32_t slots_;
  WaitPolicy wait_;
  // Counters this rank keeps for each peer's rings; only tails and slot sequence words are shared.
  struct PeerState {
    uint32_t sent = 0;       // slots written to the peer's ring from us
    uint32_t tail_seen = 0;  // the peer's consumed count, last read
    uint32_t received = 0;   // slots consumed from the peer's ring to us
  };
  std::vector<std::unique_ptr<RingSegment>> segments_;  // [rank]; own at mesh_->rank()
  std::vector<PeerState> peers_;
  Status broken_;
};

}  // namespace korovod
