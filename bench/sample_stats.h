// Statistics of timed samples exactly as the peers' bench_common.h stats_of() computes them, so
// korovod's rows and the peers' rows summarise their samples the same way.
#pragma once

#include <vector>

namespace korovod::bench {

struct SampleStats {
  double median = 0, min = 0, mean = 0, p90 = 0;
};

// Median of an even count is the mean of the middle two; p90 is the ceil(0.9 n)-th smallest.
SampleStats SampleStatsOf(std::vector<double> v);

}  // namespace korovod::bench
