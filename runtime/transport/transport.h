// Transport: moves bytes between this rank and its peers. The algorithm layer talks only to this
// interface and never learns whether bytes cross TCP or shared memory.
//
// Messages carry no header: both sides know every message's length from the collective's
// arguments, and messages between a pair of ranks arrive in the order they were sent. Sender and
// receiver must also agree on message boundaries (TCP stripes a message by its length).
#pragma once

#include <cstddef>
#include <string>

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
};

}  // namespace korovod
