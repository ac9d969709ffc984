// The search space: [0,1]^4 mapped to TunableParams, each dimension on a log scale between its
// bounds, byte counts rounded to a quantum.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/core/autotune/autotuner.h"

namespace korovod::autotune {

inline constexpr int kTunableDims = 4;  // fusion threshold, cycle time, small allreduce, stripe

struct LogRange {
  double lo;
  double hi;
};

inline constexpr LogRange kFusionThresholdRange{1 << 20, 256 << 20};  // bytes
inline constexpr LogRange kCycleTimeRange{0.25, 20.0};                // ms
inline constexpr LogRange kSmallAllreduceRange{4 << 10, 512 << 10};   // bytes
inline constexpr LogRange kTcpStripeRange{64 << 10, 8 << 20};         // bytes

inline constexpr int64_t kFusionThresholdQuantum = 64 << 10;
inline constexpr int64_t kSmallAllreduceQuantum = 256;
inline constexpr int64_t kTcpStripeQuantum = 4 << 10;

// x has kTunableDims coordinates in [0,1] (clamped): lo * (hi / lo)^x per dimension, byte counts
// rounded to the nearest multiple of their quantum within the bounds.
TunableParams ParamsFromPoint(std::span<const double> x);

// The inverse: each parameter's position on its log scale, clamped to [0,1] (parameters outside
// the bounds map to the nearest face).
std::vector<double> PointFromParams(const TunableParams& params);

}  // namespace korovod::autotune
