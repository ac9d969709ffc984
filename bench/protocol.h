// The peers' measurement protocol (../shared/bench/peers/README.md, bench_common.h),
// re-implemented over the world's own Barrier and Allreduce(kMax, float64) (korovod in process,
// or through its sidecar) so that korovod rows are comparable with the Open MPI / Gloo / torch
// rows in the same table:
//
//   1. verify:   fill (rank+1 based), one op, full check, verdict MAX-reduced over ranks
//   2. estimate: 3 barrier-aligned ops -> t_est per op, t_it per barrier+op (max over ranks)
//   3. warm-up:  clamp(0.2*T/t_it, 1, 1000) barrier-aligned ops
//   4. timed:    clamp(T/t_it, min_iters, max_iters) x { barrier; t0; op; t1 }, per-iteration
//                times MAX-reduced elementwise over ranks -> median/min/mean/p90
//   5. loop:     clamp(0.3*T/t_est, 3, max_iters) back-to-back ops between two barriers,
//                average per op, max over ranks
//   6. verify again
#pragma once

#include <cstddef>
#include <string>

#include "bench/bench_ops.h"
#include "bench/bench_world.h"
#include "common/status.h"

namespace korovod::bench {

struct ProtocolOptions {
  double target_s = 0.7;
  int min_iters = 5;
  int max_iters = 200000;
  bool loop = true;
  bool inject_fault = false;  // PEERBENCH_INJECT_FAULT: corrupt one element on rank 0
};

// Identical on every rank (every number is max-reduced before it is stored).
struct Measurement {
  size_t bytes = 0;
  bool verified = false;
  double median_s = 0, min_s = 0, mean_s = 0, p90_s = 0;
  double loop_s = -1;  // -1: loop skipped
  int iters = 0, warmup = 0, loop_iters = 0;
};

// Runs steps 1-6 for one message size (already rounded by op.RoundBytes). A collective error
// (peer gone, timeout) is returned; a wrong result is not an error but verified == false.
Status MeasureSize(BenchWorld& world, BenchOp& op, size_t bytes, const ProtocolOptions& opts,
                   Measurement* m);

// What a JSON row says besides the measurement.
struct RowLabels {
  std::string transport;
  int ranks = 0;
  std::string algo;
  std::string op;
  std::string dtype;
  double bus_factor = 1;
  bool inplace = true;
  bool loop = true;
};

// One line of the peers' JSON schema (bench_common.h field order and number formats), plus
// "op", "dtype" and "version".
std::string FormatRow(const RowLabels& labels, const Measurement& m);

}  // namespace korovod::bench
