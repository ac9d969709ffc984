// The environment contract between the operator and the processes in a worker pod: the variable
// names the sidecar (sidecar/daemon/sidecar_config.h, runtime/core/engine_config.cc) and the
// trainer client read, and the paths of the volumes that carry the socket, /dev/shm and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace korovod::op {

inline constexpr std::string_view kEnvRank = "KOROVOD_RANK";
inline constexpr std::string_view kEnvSize = "KOROVOD_SIZE";
inline constexpr std::string_view kEnvSocket = "KOROVOD_SOCKET";
inline constexpr std::string_view kEnvCoordinator = "KOROVOD_COORDINATOR";
inline constexpr std::string_view kEnvEpoch = "KOROVOD_EPOCH";
// The job key, from the Secret through secretKeyRef: a non-root sidecar cannot read a root-owned
// 0400 Secret file, and a group-readable one (fsGroup) would reach the trainer too.
inline constexpr std::string_view kEnvJobKey = "KOROVOD_JOB_KEY";
inline constexpr std::string_view kJobKeySecretKey = "key";
inline constexpr std::string_view kEnvShmPrefix = "KOROVOD_SHM_PREFIX";
inline constexpr std::string_view kEnvMetricsPort = "KOROVOD_METRICS_PORT";
inline constexpr std::string_view kEnvIface = "KOROVOD_IFACE";
inline constexpr std::string_view kEnvFusionThreshold = "KOROVOD_FUSION_THRESHOLD";
inline constexpr std::string_view kEnvCycleTime = "KOROVOD_CYCLE_TIME";
inline constexpr std::string_view kEnvTimeline = "KOROVOD_TIMELINE";

inline constexpr std::string_view kSocketFileName = "sidecar.sock";

// Pod volumes the operator adds (unless the template already has a volume of that name).
inline constexpr std::string_view kSocketVolume = "korovod-socket";
inline constexpr std::string_view kShmVolume = "dshm";
inline constexpr std::string_view kTimelineVolume = "korovod-timeline";

inline constexpr std::string_view kShmMountPath = "/dev/shm";

inline constexpr std::string_view kMetricsPortName = "metrics";
inline constexpr std::string_view kReadyzPath = "/readyz";
inline constexpr std::string_view kHealthzPath = "/healthz";

inline constexpr std::string_view kGpuResourceName = "nvidia.com/gpu";
inline constexpr std::string_view kIpcLockCapability = "IPC_LOCK";

// One plain {name, value} entry of a container's env.
inline nlohmann::json EnvVar(std::string_view name, const std::string& value) {
  return nlohmann::json{{"name", std::string(name)}, {"value", value}};
}

}  // namespace korovod::op
