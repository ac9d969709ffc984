// What every algorithm gets: the transport, the set it runs on, and the collective's deadline.
// Algorithms address peers by set rank; the context maps them to global ranks for the transport.
#pragma once

#include <cstddef>
#include <vector>

#include "common/data_type.h"
#include "common/deadline.h"
#include "common/reduce_op.h"
#include "common/status.h"
#include "runtime/transport/transport.h"
#include "runtime/world/communicator.h"
#include "runtime/world/process_set.h"

namespace korovod {

struct AlgorithmContext {
  Communicator& comm;
  const ProcessSet& set;
  Deadline deadline;
  // The transport that reaches the set's members when it is not the communicator's own (the
  // shared memory among one host's ranks, for the local phases of a hierarchical collective).
  Transport* via = nullptr;

  int rank() const { return set.rank(); }
  int size() const { return set.size(); }
  // Global rank of the set member `set_rank` positions away, wrapping around the set.
  int peer(int set_rank) const {
    const int n = size();
    return set.global_rank(((set_rank % n) + n) % n);
  }
  Transport& transport() { return via != nullptr ? *via : comm.transport(); }

  Status Send(int set_rank, const std::byte* data, size_t len) {
    return transport().Exchange({peer(set_rank), data, len}, {}, deadline);
  }
  Status Recv(int set_rank, std::byte* dest, size_t len) {
    RecvSpec r;
    r.peer = peer(set_rank);
    r.len = len;
    r.dest = dest;
    return transport().Exchange({}, r, deadline);
  }
};

// Marks a phase of a collective for the communicator's PhaseObserver (the timeline), if any.
class PhaseScope {
 public:
  PhaseScope(AlgorithmContext& ctx, const char* phase) : observer_(ctx.comm.phase_observer()) {
    if (observer_ != nullptr) observer_->PhaseBegin(phase);
  }
  ~PhaseScope() {
    if (observer_ != nullptr) observer_->PhaseEnd();
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseObserver* observer_;
};

// Byte offsets of size()+1 block boundaries: block i is [offsets[i], offsets[i+1]).
using BlockLayout = std::vector<size_t>;

// Splits count elements into n nearly equal blocks (the first count % n get one more).
BlockLayout EvenBlocks(size_t count, int n, size_t elem_size);
// Blocks of the given element counts, back to back.
BlockLayout BlocksOf(const size_t* counts, int n, size_t elem_size);

}  // namespace korovod
