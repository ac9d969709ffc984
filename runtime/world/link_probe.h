// Link probe: a short bandwidth measurement of this rank's ring-neighbour links over the
// communicator's own transport, run once at start-up before the first collective. Each rank sends
// a few MiB to its next neighbour while receiving from its previous one (then the reverse); a
// link's rate is bytes over the best of a few timed rounds. Every rank of the world must call it
// at the same point, since the messages pair up like any collective's.
#pragma once

#include <cstddef>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/world/communicator.h"

namespace korovod {

struct LinkRate {
  int peer = -1;
  double bytes_per_second = 0;
};

// Ring neighbours, next (rank+1) first; one entry in a world of 2, none in a world of 1.
// `bytes` per timed round (a few MiB keeps the whole probe well under a second on any real link).
StatusOr<std::vector<LinkRate>> ProbeRingLinks(Communicator& comm, size_t bytes, Deadline deadline);

}  // namespace korovod
