#include "operator/controller/worker_pod_builder.h"

#include <algorithm>
#include <set>
#include <string>

#include "operator/api/validate.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"
#include "operator/controller/extended_resource.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/sidecar_container.h"
#include "operator/controller/torch_env.h"
#include "operator/controller/worker_env.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

std::string NameOf(const json& item) {
  if (!item.is_object()) return "";
  auto it = item.find("name");
  return it != item.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Makes object[key] an object (or array) when it is absent or of another type.
json& Ensure(json& object, const char* key, json empty) {
  if (!object.contains(key) || object[key].type() != empty.type()) object[key] = std::move(empty);
  return object[key];
}

// Korovod's variables first (so template entries can expand $(KOROVOD_RANK)), then the
// template's, minus any that would shadow korovod's.
void MergeTrainerEnv(json& trainer, const json& korovod_env) {
  std::set<std::string> ours;
  for (const json& e : korovod_env) ours.insert(NameOf(e));
  json env = korovod_env;
  if (trainer.contains("env") && trainer["env"].is_array()) {
    for (const json& e : trainer["env"]) {
      if (ours.count(NameOf(e)) == 0) env.push_back(e);
    }
  }
  trainer["env"] = std::move(env);
}

void AddMountUnlessPathTaken(json& container, std::string_view volume, const std::string& path) {
  json& mounts = Ensure(container, "volumeMounts", json::array());
  for (const json& m : mounts) {
    if (m.is_object() && m.contains("mountPath") && m["mountPath"] == path) return;
  }
  mounts.push_back({{"name", std::string(volume)}, {"mountPath", path}});
}

void AddVolumeUnlessNameTaken(json& pod_spec, json volume) {
  json& volumes = Ensure(pod_spec, "volumes", json::array());
  const std::string name = NameOf(volume);
  for (const json& v : volumes) {
    if (NameOf(v) == name) return;
  }
  volumes.push_back(std::move(volume));
}

json MergedStringMap(const json& template_meta, const char* key) {
  json out = json::object();
  if (template_meta.is_object() && template_meta.contains(key) && template_meta[key].is_object()) {
    for (const auto& [k, v] : template_meta[key].items()) {
      if (v.is_string()) out[k] = v;
    }
  }
  return out;
}

}  // namespace

void ShareTrainerDevices(const json& trainer, const HorovodJobSpec& spec, json& sidecar) {
  // Dynamic Resource Allocation: every claim the trainer names, the sidecar names too. Containers
  // of a pod that name one claim share its devices, so both see the same GPUs.
  const json* claims = nullptr;
  if (auto r = trainer.find("resources"); r != trainer.end() && r->is_object()) {
    if (auto c = r->find("claims"); c != r->end() && c->is_array() && !c->empty()) claims = &*c;
  }
  if (claims != nullptr) {
    json& mine = Ensure(Ensure(sidecar, "resources", json::object()), "claims", json::array());
    for (const json& c : *claims) {
      if (std::find(mine.begin(), mine.end(), c) == mine.end()) mine.push_back(c);
    }
    return;
  }
  // The device plugin gives spec.worker.gpus to the trainer alone; the NVIDIA container runtime
  // shows the sidecar the node's GPUs, among them the trainer's, which it finds by UUID
  // (docs/adr/0012-gpus-shared-by-trainer-and-sidecar.md).
  if (spec.worker.gpus > 0) {
    json& env = Ensure(sidecar, "env", json::array());
    env.push_back(EnvVar(kEnvNvidiaVisibleDevices, "all"));
    env.push_back(EnvVar(kEnvNvidiaDriverCapabilities, "compute,utility"));
  }
}

WorkerIdentity HorovodJobWorker(const HorovodJob& job, int64_t index, int64_t epoch,
                                const OperatorSettings& settings,
                                const std::string& elastic_rendezvous) {
  WorkerIdentity id;
  id.ranks = RanksPerWorker(job.spec.worker);
  id.rank = index * id.ranks;
  id.size = job.spec.replicas * id.ranks;
  id.index = index;
  id.workers = job.spec.replicas;
  id.coordinator = CoordinatorAddress(job, settings);
  id.key_secret = JobKeySecretName(job);
  id.shm_prefix = "/korovod-" + job.metadata.name + "-" + std::to_string(index) + "-";
  id.epoch = epoch;
  id.ports = JobWorkerPorts(job, index, settings);
  id.host_network = job.spec.networking.host_network;
  id.start_timeout_seconds = job.spec.run_policy.startup_timeout_seconds;
  if (job.spec.elastic) {
    id.rank = 0;  // each epoch places it
    id.size = 0;
    id.workers = 0;
    id.elastic_rendezvous = elastic_rendezvous;
    id.elastic_timeout_seconds = job.spec.elastic->timeout_seconds;
    id.pod_name = WorkerPodName(job, index);
  }
  return id;
}

void ConfigureWorkerPodSpec(json& pod_spec, int trainer_index, const HorovodJobSpec& spec,
                            const WorkerIdentity& id, const OperatorSettings& settings) {
  json& containers = Ensure(pod_spec, "containers", json::array());
  if (trainer_index >= 0 && static_cast<size_t>(trainer_index) < containers.size() &&
      containers[trainer_index].is_object()) {
    json& trainer = containers[trainer_index];
    json env = json::array();
    if (id.elastic_rendezvous.empty()) {
      env.push_back(EnvVar(kEnvRank, std::to_string(id.rank)));
      env.push_back(EnvVar(kEnvSize, std::to_string(id.size)));
      env.push_back(EnvVar(kEnvSocket, SocketPath(settings, id)));
      env.push_back(EnvVar(kEnvCoordinator, id.coordinator));
      if (id.epoch) env.push_back(EnvVar(kEnvEpoch, std::to_string(*id.epoch)));
    } else {
      // Rank and size come from each epoch (hvd.rank(), hvd.size()); hvd.init waits for the
      // epoch to form, up to the elastic timeout plus the sidecar's start.
      env.push_back(EnvVar(kEnvSocket, SocketPath(settings, id)));
      env.push_back(EnvVar(kEnvHorovodElastic, "1"));
      env.push_back(EnvVar(kEnvConnectTimeout,
                           std::to_string(id.elastic_timeout_seconds + id.start_timeout_seconds)));
    }
    if (id.ranks > 1) {
      for (json& v : LocalRanksEnv(id)) env.push_back(std::move(v));
    }
    if (id.ranks > 1 && trainer.contains("command") && trainer["command"].is_array()) {
      // korovod-local-ranks runs the command once per local rank with each one's rank, local
      // rank and socket (python/korovod/runner/local_ranks.py), as torchrun --nproc-per-node.
      json command = json::array({std::string(kLocalRanksProgram), "--"});
      for (const json& part : trainer["command"]) command.push_back(part);
      if (trainer.contains("args") && trainer["args"].is_array()) {
        for (const json& part : trainer["args"]) command.push_back(part);
        trainer.erase("args");
      }
      trainer["command"] = std::move(command);
      // A failing local rank's line ("local rank 1 (rank 5) exited with code 3") is the last the
      // container writes: the kubelet makes it the termination message the worker's status shows.
      if (!trainer.contains("terminationMessagePolicy")) {
        trainer["terminationMessagePolicy"] = "FallbackToLogsOnError";
      }
    }
    MergeTrainerEnv(trainer, env);
    // After the template's own env: a variable the user set there stays theirs.
    AddTorchDistributedEnv(trainer, id);
    AddMountUnlessPathTaken(trainer, kSocketVolume, settings.socket_dir);
    AddMountUnlessPathTaken(trainer, kShmVolume, std::string(kShmMountPath));
    if (spec.worker.gpus > 0) {
      SetExtendedResource(Ensure(trainer, "resources", json::object()),
                          std::string(kGpuResourceName), spec.worker.gpus);
    }
  }

  // The trainer, whatever its uid, joins the sidecar's group, which owns the socket and the
  // arena (mode 0660) in the shared emptyDirs. A supplemental group rather than fsGroup: fsGroup
  // would also chown the template's own volumes, a slow walk over a large dataset volume.
  json& pod_security = Ensure(pod_spec, "securityContext", json::object());
  json& groups = Ensure(pod_security, "supplementalGroups", json::array());
  if (std::find(groups.begin(), groups.end(), json(kSidecarGid)) == groups.end()) {
    groups.push_back(kSidecarGid);
  }

  // Workers never call the API server: no service-account token unless the template asks.
  if (!pod_spec.contains("automountServiceAccountToken")) {
    pod_spec["automountServiceAccountToken"] = false;
  }

  // The native sidecar goes first so it is up before any template init container runs.
  json sidecar = BuildSidecarContainer(spec, id, settings);
  if (trainer_index >= 0 && static_cast<size_t>(trainer_index) < containers.size()) {
    ShareTrainerDevices(containers[trainer_index], spec, sidecar);
  }
  json init = json::array({std::move(sidecar)});
  if (pod_spec.contains("initContainers") && pod_spec["initContainers"].is_array()) {
    for (const json& c : pod_spec["initContainers"]) init.push_back(c);
  }
  pod_spec["initContainers"] = std::move(init);

  AddVolumeUnlessNameTaken(pod_spec,
                           {{"name", std::string(kSocketVolume)}, {"emptyDir", json::object()}});
  AddVolumeUnlessNameTaken(
      pod_spec, {{"name", std::string(kShmVolume)}, {"emptyDir", {{"medium", "Memory"}}}});
  if (!TimelineDirectory(spec, settings).empty()) {
    AddVolumeUnlessNameTaken(
        pod_spec, {{"name", std::string(kTimelineVolume)}, {"emptyDir", json::object()}});
  }
}

json BuildWorkerPod(const HorovodJob& job, int64_t index, int64_t epoch,
                    const OperatorSettings& settings, const std::string& elastic_rendezvous) {
  const HorovodJobSpec& spec = job.spec;
  const json empty = json::object();
  const json& template_meta =
      spec.pod_template.contains("metadata") ? spec.pod_template["metadata"] : empty;

  json metadata = ChildMetadata(job, WorkerPodName(job, index));
  json labels = MergedStringMap(template_meta, "labels");
  for (const auto& [k, v] : metadata["labels"].items()) labels[k] = v;
  labels[std::string(kLabelRole)] = std::string(kRoleWorker);
  labels[std::string(kLabelReplicaIndex)] = std::to_string(index);
  labels[std::string(kLabelEpoch)] = std::to_string(epoch);
  json annotations = MergedStringMap(template_meta, "annotations");

  json pod_spec = spec.pod_template.contains("spec") && spec.pod_template["spec"].is_object()
                      ? spec.pod_template["spec"]
                      : json::object();
  // A worker that restarts in place would rejoin a world that moved on; the operator restarts
  // the whole world as a new epoch instead.
  pod_spec["restartPolicy"] = "Never";
  pod_spec["hostname"] = WorkerPodName(job, index);
  pod_spec["subdomain"] = ServiceName(job);

  const SchedulingPolicy& scheduling = spec.scheduling_policy;
  if (!scheduling.scheduler_name.empty()) pod_spec["schedulerName"] = scheduling.scheduler_name;
  if (!scheduling.priority_class_name.empty()) {
    pod_spec["priorityClassName"] = scheduling.priority_class_name;
  }
  if (scheduling.gang.enabled && scheduling.gang.provider) {
    if (*scheduling.gang.provider == GangProvider::kVolcano) {
      annotations[std::string(kVolcanoGroupNameAnnotation)] = PodGroupName(job);
      if (!pod_spec.contains("schedulerName")) {
        pod_spec["schedulerName"] = std::string(kVolcanoSchedulerName);
      }
    } else {
      labels[std::string(kSchedulerPluginsPodGroupLabel)] = PodGroupName(job);
    }
  }
  if (spec.networking.host_network) {
    pod_spec["hostNetwork"] = true;
    pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet";
  }

  metadata["labels"] = std::move(labels);
  if (!annotations.empty()) metadata["annotations"] = std::move(annotations);

  ConfigureWorkerPodSpec(pod_spec, TrainerContainerIndex(spec), spec,
                         HorovodJobWorker(job, index, epoch, settings, elastic_rendezvous),
                         settings);

  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", std::move(metadata)},
              {"spec", std::move(pod_spec)}};
}

}  // namespace korovod::k8s_operator
