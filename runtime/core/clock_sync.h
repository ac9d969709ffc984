// Clock offsets between ranks, so that per-rank timelines can be merged onto rank 0's time axis.
// Rank 0 ping-pongs each rank a few times and keeps the exchange with the shortest round trip
// (Cristian's algorithm): offset = peer's clock - (send + receive) / 2, error below half that RTT.
#pragma once

#include <cstdint>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/world/communicator.h"

namespace korovod {

// Collective over the world. Returns this rank's steady clock minus rank 0's, in nanoseconds.
StatusOr<int64_t> MeasureClockOffset(Communicator& comm, int rounds, Deadline deadline);

}  // namespace korovod
