// The environment contract between the operator and the processes in a worker pod: the variable
// names the sidecar (sidecar/daemon/sidecar_config.h, runtime/core/engine_config.cc) and the
// trainer client read, and the paths of the volumes that carry the socket, /dev/shm and the key.
// The names themselves live in common/env_names.h, shared with their readers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/env_names.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kEnvRank = env::kRank;
inline constexpr std::string_view kEnvSize = env::kSize;
inline constexpr std::string_view kEnvSocket = env::kSocket;
inline constexpr std::string_view kEnvCoordinator = env::kCoordinator;
inline constexpr std::string_view kEnvEpoch = env::kEpoch;
// The job key, from the Secret through secretKeyRef: a non-root sidecar cannot read a root-owned
// 0400 Secret file, and a group-readable one (fsGroup) would reach the trainer too.
inline constexpr std::string_view kEnvJobKey = env::kJobKey;
inline constexpr std::string_view kJobKeySecretKey = "key";
inline constexpr std::string_view kEnvShmPrefix = env::kShmPrefix;
inline constexpr std::string_view kEnvMetricsPort = env::kMetricsPort;
inline constexpr std::string_view kEnvIface = env::kIface;
inline constexpr std::string_view kEnvFusionThreshold = env::kFusionThreshold;
inline constexpr std::string_view kEnvCycleTime = env::kCycleTime;
inline constexpr std::string_view kEnvTimeline = env::kTimeline;
inline constexpr std::string_view kEnvStartTimeout = env::kStartTimeoutSeconds;
inline constexpr std::string_view kEnvElasticRendezvous = env::kElasticRendezvous;
inline constexpr std::string_view kEnvWorkerId = env::kWorkerId;
inline constexpr std::string_view kEnvHostName = env::kHostName;
inline constexpr std::string_view kEnvElasticTimeout = env::kElasticTimeoutSeconds;
// The pod's uid (downward API), expanded into KOROVOD_WORKER_ID; not an engine variable.
inline constexpr std::string_view kEnvPodUid = "KOROVOD_POD_UID";
// The trainer: hvd.init waits this long for its epoch (elastic timeout + start-up timeout).
inline constexpr std::string_view kEnvConnectTimeout = "KOROVOD_CONNECT_TIMEOUT";
inline constexpr std::string_view kEnvHorovodElastic = "HOROVOD_ELASTIC";

inline constexpr std::string_view kSocketFileName = "sidecar.sock";
// A pod of several ranks: one socket per local rank (the sidecar and korovod-local-ranks
// replace the placeholder).
inline constexpr std::string_view kLocalRankSocketFileName = "sidecar-{local_rank}.sock";
// The trainer image's entry point that runs the command once per local rank.
inline constexpr std::string_view kLocalRanksProgram = "korovod-local-ranks";

// Pod volumes the operator adds (unless the template already has a volume of that name).
inline constexpr std::string_view kSocketVolume = "korovod-socket";
inline constexpr std::string_view kShmVolume = "dshm";
inline constexpr std::string_view kTimelineVolume = "korovod-timeline";

inline constexpr std::string_view kShmMountPath = "/dev/shm";

inline constexpr std::string_view kMetricsPortName = "metrics";
inline constexpr std::string_view kCoordinatorPortName = "coordinator";

// The sidecar image's user and group (images/sidecar/Dockerfile: USER 65532:65532). The pod's
// fsGroup defaults to the same group so the trainer, whatever its uid, may use the socket and
// the arena the sidecar creates (mode 0660) in the shared volumes.
inline constexpr int64_t kSidecarUid = 65532;
inline constexpr int64_t kSidecarGid = 65532;
inline constexpr std::string_view kReadyzPath = "/readyz";
inline constexpr std::string_view kHealthzPath = "/healthz";

inline constexpr std::string_view kGpuResourceName = "nvidia.com/gpu";
// The NVIDIA container runtime's device selection (device-plugin path, see ShareTrainerDevices).
inline constexpr std::string_view kEnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES";
inline constexpr std::string_view kEnvNvidiaDriverCapabilities = "NVIDIA_DRIVER_CAPABILITIES";
inline constexpr std::string_view kIpcLockCapability = "IPC_LOCK";

// One plain {name, value} entry of a container's env.
inline nlohmann::json EnvVar(std::string_view name, const std::string& value) {
  return nlohmann::json{{"name", std::string(name)}, {"value", value}};
}

}  // namespace korovod::k8s_operator
