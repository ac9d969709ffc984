// korovod-gradbench's output: step-time statistics, the JSON rows (peers schema, one per model x
// transport x mode x gap, korovod and the torch peer alike), and the readable table with the
// fusion speedups.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/sample_stats.h"
#include "nlohmann/json.hpp"

namespace korovod::bench {

using Row = nlohmann::ordered_json;

// bench_common.h stats_of(): median (mean of the middle two for even counts), min, mean, and p90
// = the ceil(0.9 n)-th smallest.
using StepTimes = SampleStats;  // of the per-step times, in seconds

// The schema's leading fields: peer, transport, ranks, bytes (gradient bytes per rank per step),
// time_us (median exposed communication per step), algbw_gbps, busbw_gbps (2(N-1)/N), the
// min/mean/p90, iters (timed steps), warmup, algo.
Row StepRow(const std::string& peer, const std::string& transport, int ranks, uint64_t bytes,
            const StepTimes& t, int steps, int warmup, const std::string& algo);

// Parses the JSON lines of `text` that are objects with a "peer" key (other lines are ignored, as
// run_peers.sh does).
std::vector<Row> ParseRows(const std::string& text);

// Per model x transport x gap: every row's median/p90 comm time per step, collectives and cache
// hits per step, negotiation fraction, then the speedups (fusion on / autotune vs off, autotune vs
// on; torch bucketed vs per-tensor).
void PrintTable(const std::vector<Row>& rows, FILE* out);

}  // namespace korovod::bench
