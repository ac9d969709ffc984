#include "runtime/core/autotune/param_space.h"

#include <algorithm>
#include <cmath>

namespace korovod::autotune {
namespace {

double FromUnit(double x, LogRange r) {
  return r.lo * std::pow(r.hi / r.lo, std::clamp(x, 0.0, 1.0));
}

double ToUnit(double v, LogRange r) {
  if (!(v > 0.0)) return 0.0;
  return std::clamp(std::log(v / r.lo) / std::log(r.hi / r.lo), 0.0, 1.0);
}

int64_t RoundBytes(double v, LogRange r, int64_t quantum) {
  const auto lo = static_cast<int64_t>(r.lo);
  const auto hi = static_cast<int64_t>(r.hi);
  const auto rounded =
      static_cast<int64_t>(std::llround(v / static_cast<double>(quantum))) * quantum;
  return std::clamp(rounded, lo, hi);
}

}  // namespace

TunableParams ParamsFromPoint(std::span<const double> x) {
  TunableParams p;
  p.fusion_threshold_bytes = RoundBytes(FromUnit(x[0], kFusionThresholdRange),
                                        kFusionThresholdRange, kFusionThresholdQuantum);
  p.cycle_time_ms = FromUnit(x[1], kCycleTimeRange);
  p.small_allreduce_max_bytes = RoundBytes(FromUnit(x[2], kSmallAllreduceRange),
                                           kSmallAllreduceRange, kSmallAllreduceQuantum);
  p.tcp_stripe_min_bytes =
      RoundBytes(FromUnit(x[3], kTcpStripeRange), kTcpStripeRange, kTcpStripeQuantum);
  return p;
}

std::vector<double> PointFromParams(const TunableParams& params) {
  return {ToUnit(static_cast<double>(params.fusion_threshold_bytes), kFusionThresholdRange),
          ToUnit(params.cycle_time_ms, kCycleTimeRange),
          ToUnit(static_cast<double>(params.small_allreduce_max_bytes), kSmallAllreduceRange),
          ToUnit(static_cast<double>(params.tcp_stripe_min_bytes), kTcpStripeRange)};
}

}  // namespace korovod::autotune
