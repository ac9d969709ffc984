#include "operator/controller/sidecar_container.h"

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

json HttpProbe(std::string_view path, int period_seconds, int failure_threshold) {
  return json{{"httpGet", {{"path", std::string(path)}, {"port", std::string(kMetricsPortName)}}},
              {"periodSeconds", period_seconds},
              {"failureThreshold", failure_threshold}};
}

}  // namespace

std::string SocketPath(const OperatorSettings& settings) {
  return settings.socket_dir + "/" + std::string(kSocketFileName);
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
  json env = json::array({
      EnvVar(kEnvRank, std::to_string(id.rank)),
      EnvVar(kEnvSize, std::to_string(id.size)),
      EnvVar(kEnvCoordinator, id.coordinator),
      EnvVar(kEnvSocket, SocketPath(settings)),
      json{{"name", std::string(kEnvJobKey)},
           {"valueFrom",
            {{"secretKeyRef", {{"name", id.key_secret}, {"key", std::string(kJobKeySecretKey)}}}}}},
      EnvVar(kEnvShmPrefix, id.shm_prefix),
      EnvVar(kEnvMetricsPort, std::to_string(settings.metrics_port)),
  });
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

  return json{
      {"name", std::string(kSidecarContainerName)},
      {"image", spec.sidecar.image.empty() ? settings.default_sidecar_image : spec.sidecar.image},
      {"restartPolicy", "Always"},
      {"env", std::move(env)},
      {"ports", json::array({{{"name", std::string(kMetricsPortName)},
                              {"containerPort", settings.metrics_port},
                              {"protocol", "TCP"}}})},
      {"resources", std::move(resources)},
      {"volumeMounts", std::move(mounts)},
      // Rendezvous waits for every rank, so startup gets minutes; liveness only after that.
      {"startupProbe", HttpProbe(kHealthzPath, 2, 90)},
      {"livenessProbe", HttpProbe(kHealthzPath, 10, 3)},
      {"readinessProbe", HttpProbe(kReadyzPath, 5, 1)},
      {"securityContext",
       {{"runAsNonRoot", true},
        {"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"capabilities", std::move(capabilities)}}},
  };
}

}  // namespace korovod::k8s_operator
