#include "operator/controller/sidecar_container.h"

#include <algorithm>
#include <charconv>

#include "operator/controller/child_names.h"
#include "operator/controller/extended_resource.h"
#include "operator/controller/worker_env.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

// Shortest round-trip decimal, so the same spec always renders the same text.
std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// timeoutSeconds 5, not the default 1: an engine busy with a large allreduce on a loaded node
// may answer late, and three late answers would restart a sidecar in mid-training.
json HttpProbe(std::string_view path, int64_t period_seconds, int64_t failure_threshold) {
  return json{{"httpGet", {{"path", std::string(path)}, {"port", std::string(kMetricsPortName)}}},
              {"periodSeconds", period_seconds},
              {"timeoutSeconds", 5},
              {"failureThreshold", failure_threshold}};
}

}  // namespace

std::string SocketPath(const OperatorSettings& settings, const WorkerIdentity& id) {
  if (id.ranks > 1) return settings.socket_dir + "/" + std::string(kLocalRankSocketFileName);
  return settings.socket_dir + "/" + std::string(kSocketFileName);
}

json LocalRanksEnv(const WorkerIdentity& id) {
  return json::array({
      EnvVar(env::kSidecarRanks, std::to_string(id.ranks)),
      EnvVar(env::kLocalSize, std::to_string(id.ranks)),
      EnvVar(env::kCrossRank, std::to_string(id.index)),
      EnvVar(env::kCrossSize, std::to_string(id.workers)),
  });
}

std::string TimelineDirectory(const HorovodJobSpec& spec, const OperatorSettings& settings) {
  const std::string& timeline = spec.sidecar.engine.timeline;
  const size_t slash = timeline.rfind('/');
  if (timeline.empty() || slash == std::string::npos || slash == 0) return "";
  std::string dir = timeline.substr(0, slash);
  if (dir == settings.socket_dir || dir == kShmMountPath) return "";  // already writable
  return dir;
}

json BuildSidecarContainer(const HorovodJobSpec& spec, const WorkerIdentity& id,
                           const OperatorSettings& settings) {
  json env = json::array();
  if (id.elastic_rendezvous.empty()) {
    env.push_back(EnvVar(kEnvRank, std::to_string(id.rank)));
    env.push_back(EnvVar(kEnvSize, std::to_string(id.size)));
    env.push_back(EnvVar(kEnvCoordinator, id.coordinator));
  } else {
    // Declared before the worker id, which expands it (the kubelet's $(VAR) rule).
    env.push_back(
        json{{"name", std::string(kEnvPodUid)},
             {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.uid"}}}}}});
    env.push_back(EnvVar(kEnvElasticRendezvous, id.elastic_rendezvous));
    env.push_back(EnvVar(kEnvWorkerId, id.pod_name + ".$(" + std::string(kEnvPodUid) + ")"));
    env.push_back(EnvVar(kEnvHostName, id.pod_name));  // a pod is a host: its own /dev/shm
    env.push_back(EnvVar(kEnvElasticTimeout, std::to_string(id.elastic_timeout_seconds)));
  }
  for (json v : json::array({
           EnvVar(kEnvSocket, SocketPath(settings, id)),
           json{{"name", std::string(kEnvJobKey)},
                {"valueFrom",
                 {{"secretKeyRef",
                   {{"name", id.key_secret}, {"key", std::string(kJobKeySecretKey)}}}}}},
           EnvVar(kEnvShmPrefix, id.shm_prefix),
           EnvVar(kEnvMetricsPort, std::to_string(id.ports.metrics)),
           EnvVar(kEnvStartTimeout, std::to_string(id.start_timeout_seconds)),
       })) {
    env.push_back(std::move(v));
  }
  // The generation is part of every peer handshake: a sidecar of an older epoch (its pod not yet
  // gone) can never join this one's world.
  if (id.epoch) env.push_back(EnvVar(kEnvEpoch, std::to_string(*id.epoch)));
  if (id.ranks > 1) {
    for (json& v : LocalRanksEnv(id)) env.push_back(std::move(v));
  }
  if (!spec.networking.interface_name.empty()) {
    env.push_back(EnvVar(kEnvIface, spec.networking.interface_name));
  }
  const EngineSpec& engine = spec.sidecar.engine;
  if (engine.fusion_threshold_bytes) {
    env.push_back(EnvVar(kEnvFusionThreshold, std::to_string(*engine.fusion_threshold_bytes)));
  }
  if (engine.cycle_time_ms)
    env.push_back(EnvVar(kEnvCycleTime, FormatDouble(*engine.cycle_time_ms)));
  if (!engine.timeline.empty()) env.push_back(EnvVar(kEnvTimeline, engine.timeline));
  for (const EnvEntry& e : spec.sidecar.env) env.push_back(EnvVar(e.name, e.value));

  json resources = spec.sidecar.resources.is_object() ? spec.sidecar.resources : json::object();
  if (spec.worker.rdma.count > 0) {
    SetExtendedResource(resources, spec.worker.rdma.resource_name, spec.worker.rdma.count);
  }

  json capabilities = {{"drop", json::array({"ALL"})}};
  // Registering RDMA memory pins pages (mlock); nothing else in the sidecar needs a capability.
  if (spec.worker.rdma.count > 0)
    capabilities["add"] = json::array({std::string(kIpcLockCapability)});

  json mounts = json::array({
      {{"name", std::string(kSocketVolume)}, {"mountPath", settings.socket_dir}},
      {{"name", std::string(kShmVolume)}, {"mountPath", std::string(kShmMountPath)}},
  });
  if (const std::string dir = TimelineDirectory(spec, settings); !dir.empty()) {
    mounts.push_back({{"name", std::string(kTimelineVolume)}, {"mountPath", dir}});
  }

  json ports = json::array({{{"name", std::string(kMetricsPortName)},
                             {"containerPort", id.ports.metrics},
                             {"protocol", "TCP"}}});
  // In the pod's network the coordinator port needs no declaration (the headless Service names
  // it); on the node's it does, so the scheduler keeps other pods wanting it off this node.
  if (id.host_network && id.rank == 0) {
    ports.push_back({{"name", std::string(kCoordinatorPortName)},
                     {"containerPort", id.ports.coordinator},
                     {"protocol", "TCP"}});
  }
  // The health server starts once the world is connected, so the startup probe waits as long as
  // the rendezvous may (plus a margin for the link probe); then the sidecar exits with the cause
  // itself, and the operator fails the job at the same bound (StartupTimeout).
  // Every second: the trainer (a native sidecar's follower) starts at the first success, so a
  // longer period is start-up latency every job pays.
  constexpr int64_t kStartupProbePeriod = 1;
  const int64_t startup_failures =
      std::max<int64_t>(id.start_timeout_seconds, 1) / kStartupProbePeriod + 30;

  return json{
      {"name", std::string(kSidecarContainerName)},
      {"image", spec.sidecar.image.empty() ? settings.default_sidecar_image : spec.sidecar.image},
      {"restartPolicy", "Always"},
      {"env", std::move(env)},
      {"ports", std::move(ports)},
      {"resources", std::move(resources)},
      {"volumeMounts", std::move(mounts)},
      {"startupProbe", HttpProbe(kHealthzPath, kStartupProbePeriod, startup_failures)},
      {"livenessProbe", HttpProbe(kHealthzPath, 10, 3)},
      {"readinessProbe", HttpProbe(kReadyzPath, 5, 1)},
      // The image's user (65532) and group, set here because the kubelet takes only the uid
      // from an image without a passwd entry and would run it with gid 0. RuntimeDefault seccomp
      // and no privilege escalation: Pod Security "restricted" (without RDMA's IPC_LOCK).
      {"securityContext",
       {{"runAsNonRoot", true},
        {"runAsUser", kSidecarUid},
        {"runAsGroup", kSidecarGid},
        {"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"seccompProfile", {{"type", "RuntimeDefault"}}},
        {"capabilities", std::move(capabilities)}}},
  };
}

}  // namespace korovod::k8s_operator
