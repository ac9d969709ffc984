// Transport: moves bytes between this rank and its peers. The algorithm layer talks only to this
// interface and never learns whether bytes cross TCP or shared memory.
//
// Messages carry no header: both sides know every message's length from the collective's
// arguments, and messages between a pair of ranks arrive in the order they were sent. Sender and
// receiver must also agree on message boundaries (TCP stripes a message by its length).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/function_ref.h"
#include "common/status.h"

namespace korovod {

// Called as received bytes become available, as (offset within message, bytes, length). Pieces
// cover the message exactly once, may come in any order (TCP stripes), and each is a multiple of
// RecvSpec::align bytes. The bytes are only valid during the call: the consumer copies or reduces
// them into place. This lets the receiver reduce chunk k while chunk k+1 is still in flight, and
// lets shared memory hand out its slots without an intermediate copy.
using RecvConsumer = FunctionRef<void(size_t offset, const std::byte* data, size_t len)>;

struct SendSpec {
  int peer = -1;  // global rank; -1: nothing to send
  const std::byte* data = nullptr;
  size_t len = 0;
};

struct RecvSpec {
  int peer = -1;  // global rank; -1: nothing to receive
  size_t len = 0;
  // Where the bytes go when they are simply stored (allgather, broadcast): transports that can
  // place them directly (TCP) skip the consumer. When null, `consume` must be set.
  std::byte* dest = nullptr;
  const RecvConsumer* consume = nullptr;
  size_t align = 1;  // element size: consumer pieces are whole elements
};

// Ranks on one host that map each other's memory: each rank owns a window that every peer reads
// directly, and the ranks of any group can meet at a barrier. Collectives reduce straight from
// the peers' windows instead of copying every chunk through a slot and back out.
class SharedWindows {
 public:
  virtual ~SharedWindows() = default;
  // Bytes in each rank's window (the same on every rank; 64-byte aligned windows).
  virtual size_t window_bytes() const = 0;
  // The window of global rank `rank`, mapped in this process (this rank's own included).
  virtual std::byte* window(int rank) = 0;
  // Where bytes of this process lie in memory that every peer maps: region 0 is this rank's
  // window, 1.. the registered SharedRegions. False when [p, p + len) is not in one region.
  struct Location {
    uint32_t region = 0;
    uint64_t offset = 0;
  };
  virtual bool Locate(const void* p, size_t len, Location* where) = 0;
  // `rank`'s bytes at `where`, as mapped here (rank's own region `where.region`).
  virtual std::byte* Resolve(int rank, const Location& where) = 0;
  // A few Locations every peer can read after the next barrier (a collective's buffers). Only
  // meaningful between two barriers of the same group. kMailboxSlots slots per rank.
  static constexpr int kMailboxSlots = 4;
  virtual void Post(int slot, const Location& where, bool valid) = 0;
  virtual bool Read(int rank, int slot, Location* where) = 0;

  // Returns once every rank in `ranks` (global ranks, this one among them) has called Barrier
  // with this rank as often as this rank has with it. Counted per pair of ranks, so ranks that
  // also share other process sets stay in step. Window writes before the barrier are visible to
  // the group's reads after it. An error names the ranks that did not arrive.
  virtual Status Barrier(const std::vector<int>& ranks, Deadline deadline) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Sends `send` and receives `recv` concurrently (either may be empty); returns when both are
  // complete. An error names the peer (rank and host:port) and what failed; after an error the
  // transport is broken and every later call returns the same error.
  virtual Status Exchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline) = 0;

  // This rank gives up (a collective failed): peers are told why, so their errors name the root
  // cause instead of this rank.
  virtual void Abort(const Status& why) = 0;

  // "tcp" or "shm".
  virtual const char* Name() const = 0;

  // Messages of at least this many bytes are split over parallel streams (where there are any).
  virtual void SetStripeMin(size_t /*bytes*/) {}

  // Shared windows of every rank, where the transport maps them (shared memory); else null.
  virtual SharedWindows* shared_windows() { return nullptr; }
};

}  // namespace korovod
