#include "runtime/core/settings_agreement.h"

#include <string>
#include <vector>

#include "common/env_names.h"
#include "runtime/collectives/collectives.h"

namespace korovod {

Status CheckSettingsAgree(Communicator& c, const EngineConfig& config) {
  // Allgathered as int64 words.
  struct Settings {
    int64_t fusion;
    int64_t fusion_tensor_max;
    double cycle;
    int64_t cache;
    int64_t stall_check;
    int64_t stall_shutdown;
    int64_t autotune;
  } mine{config.fusion_threshold_bytes, config.fusion_tensor_max_bytes,
         config.cycle_time_ms,          config.cache_capacity,
         config.stall_check.count(),    config.stall_shutdown.count(),
         config.autotune ? 1 : 0};
  std::vector<Settings> all(c.size());
  {
    constexpr size_t kWords = sizeof(Settings) / 8;
    std::vector<size_t> counts(c.size(), kWords);
    AllgatherOptions o;
    o.input = &mine;
    o.output = all.data();
    o.counts = counts;
    o.type = DataType::kInt64;
    KV_RETURN_IF_ERROR(korovod::Allgather(c, o));
  }
  for (int r = 1; r < c.size(); ++r) {
    auto differs = [&](const char* var, auto a, auto b, const char* unit = "") -> Status {
      if (a == b) return OkStatus();
      return InvalidArgument(std::string("engine settings differ between ranks: ") + var + unit +
                             " is " + std::to_string(a) + " on " + c.DescribePeer(0) + " but " +
                             std::to_string(b) + " on " + c.DescribePeer(r));
    };
    KV_RETURN_IF_ERROR(differs(env::kFusionThreshold, all[0].fusion, all[r].fusion));
    KV_RETURN_IF_ERROR(
        differs(env::kFusionTensorMax, all[0].fusion_tensor_max, all[r].fusion_tensor_max));
    KV_RETURN_IF_ERROR(differs(env::kCycleTime, all[0].cycle, all[r].cycle));
    KV_RETURN_IF_ERROR(differs(env::kCacheCapacity, all[0].cache, all[r].cache));
    KV_RETURN_IF_ERROR(
        differs(env::kStallCheckTimeSeconds, all[0].stall_check, all[r].stall_check, " (ms)"));
    KV_RETURN_IF_ERROR(differs(env::kStallShutdownTimeSeconds, all[0].stall_shutdown,
                               all[r].stall_shutdown, " (ms)"));
    KV_RETURN_IF_ERROR(differs(env::kAutotune, all[0].autotune, all[r].autotune));
  }
  return OkStatus();
}

}  // namespace korovod
