// What the engine counts, as the sidecar reports it to trainers and to /metrics.
#pragma once

#include <cstdint>

namespace korovod {

// Counters since start, for benchmarks and /metrics. Times are of the background thread.
struct EngineStats {
  uint64_t cycles = 0;
  uint64_t busy_cycles = 0;         // cycles in which this rank had ops in flight
  uint64_t negotiation_ns = 0;      // negotiation collectives in busy cycles
  uint64_t execution_ns = 0;        // executing responses (copies and collectives)
  uint64_t tensors = 0;             // ops completed
  uint64_t collectives = 0;         // data collectives run (a fused buffer counts once)
  uint64_t pipelined_segments = 0;  // of which segments of a fused buffer, copies overlapped
  uint64_t lane_collectives = 0;    // of which run on collective lanes (several at once)
  uint64_t lanes_peak_busy = 0;     // the most lanes that ran collectives at the same time
  uint64_t bytes = 0;               // tensor bytes allreduced/gathered/broadcast by this rank
  uint64_t cache_hits = 0;          // ops agreed through the response cache
  uint64_t negotiated = 0;          // ops that went through the coordinator
  uint64_t full_negotiations = 0;   // cycles that gathered request lists
  // Who waits for whom (runtime/core/straggler_monitor.h), this rank's share, from the world's
  // state exchanges.
  uint64_t waited_for_others_ns = 0;     // it had ops in flight and waited for other ranks
  uint64_t others_waited_for_me_ns = 0;  // other ranks waited for it
  uint64_t waited_before_first_ns = 0;   // ... of which before its first op of a step
  uint64_t steps = 0;                    // busy periods of the world
  uint64_t straggler_steps = 0;          // steps in which it was the one the others waited for
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
};

}  // namespace korovod
