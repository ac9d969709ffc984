// ShmTransport: ranks on one host exchange bytes through memory-mapped rings, one per directed
// pair. The sender copies a slot into the receiver's ring; the receiver reduces or copies straight
// out of the slot. No syscall per slot on the fast path: counters are atomics in the mapping, and
// a waiting rank sleeps on a futex only after spinning and yielding (see WaitPolicy). Each segment
// also holds the rank's window (SharedWindows): peers read it in place, and per-pair barrier
// counters order those reads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/function_ref.h"
#include "common/shared_memory.h"
#include "common/wait_policy.h"
#include "runtime/transport/peer_mesh.h"
#include "runtime/transport/transport.h"
#include "runtime/transport/transport_options.h"

namespace korovod {

class RingSegment;  // one rank's segment, mapped here

class ShmTransport : public Transport, public SharedWindows {
 public:
  // Creates this rank's segment, named `name_prefix` + "<pid>-r<rank>-<random>", trades segment
  // names with every peer over the mesh, maps theirs, and unlinks its own once all peers have it
  // mapped (nothing is left in /dev/shm, even if a rank is killed later). `name_prefix`: "/" and
  // at most kMaxNamePrefixBytes - 1 more characters, no other "/".
  // `window_bytes`: each rank's window (a multiple of 64; 0: none). `regions`: this rank's shared
  // regions; every peer's are mapped here (the names must stay linked until Create returns).
  // `members`: the mesh ranks this transport joins (global ranks, this one among them; every
  // member passes the same list), e.g. the ranks of one host in a world of several; empty: all.
  // Exchanges and barriers with any other rank are refused.
  static StatusOr<std::unique_ptr<ShmTransport>> Create(
      std::shared_ptr<PeerMesh> mesh, size_t slot_bytes, int slots, size_t window_bytes,
      const std::vector<SharedRegion>& regions, WaitPolicy wait, Deadline deadline,
      const std::string& name_prefix, std::vector<int> members = {});
  static constexpr size_t kMaxNamePrefixBytes = 201;
  ShmTransport(std::shared_ptr<PeerMesh> mesh, size_t slot_bytes, int slots, size_t window_bytes,
               WaitPolicy wait);
  ~ShmTransport() override;

  Status Exchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline) override;
  void Abort(const Status& why) override { mesh_->Abort(why); }
  const char* Name() const override { return "shm"; }
  SharedWindows* shared_windows() override { return window_bytes_ > 0 ? this : nullptr; }

  size_t window_bytes() const override { return window_bytes_; }
  std::byte* window(int rank) override;
  bool Locate(const void* p, size_t len, Location* where) override;
  std::byte* Resolve(int rank, const Location& where) override;
  void Post(int slot, const Location& where, bool valid) override;
  bool Read(int rank, int slot, Location* where) override;
  Status Barrier(const std::vector<int>& ranks, Deadline deadline) override;

 private:
  Status Fail(Status s);
  bool member(int rank) const {
    return rank >= 0 && rank < static_cast<int>(segments_.size()) && segments_[rank] != nullptr;
  }
  // Sleeps on this rank's doorbell unless `ready` (one slice at most), then checks that the
  // peers are alive when the last check is a slice old.
  Status BlockUntilRung(FunctionRef<bool()> ready, Clock::time_point& last_check,
                        Deadline deadline);

  std::shared_ptr<PeerMesh> mesh_;
  size_t slot_bytes_;
  uint32_t slots_;
  size_t window_bytes_;
  WaitPolicy wait_;
  // Counters this rank keeps for each peer's rings; only tails and slot sequence words are shared.
  struct PeerState {
    uint32_t sent = 0;       // slots written to the peer's ring from us
    uint32_t tail_seen = 0;  // the peer's consumed count, last read
    uint32_t received = 0;   // slots consumed from the peer's ring to us
    uint32_t barriers = 0;   // barriers this rank has entered with the peer
  };
  std::vector<std::unique_ptr<RingSegment>> segments_;  // [rank]; own at mesh_->rank()
  std::vector<PeerState> peers_;
  std::vector<SharedRegion> own_regions_;
  std::vector<std::vector<ShmMapping>> regions_;  // [rank][region - 1]; empty for this rank
  Status broken_;
};

}  // namespace korovod
