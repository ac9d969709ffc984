// The worker pod of rank `index` in `epoch`: spec.template with the trainer connected to its
// sidecar (env, socket and /dev/shm volumes, GPUs), the native sidecar prepended to
// initContainers, the DNS identity under the headless Service, and the scheduling/networking
// policy applied.
// Precedence: korovod's own env, labels and restartPolicy win over the template; the template
// wins for any other env var and for volumes/mounts it already defines (same name or path).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"
#include "operator/controller/worker_identity.h"

namespace korovod::k8s_operator {

// The identity of rank `index` of a HorovodJob in `epoch`.
// `elastic_rendezvous`: the membership server's "host:port", for a job with spec.elastic.
WorkerIdentity HorovodJobWorker(const HorovodJob& job, int64_t index, int64_t epoch,
                                const OperatorSettings& settings,
                                const std::string& elastic_rendezvous = "");

// Configures a pod spec as rank `id.rank` of the world `id` names, joined to it through its
// sidecar: the container at `trainer_index` gets korovod's env (first, replacing template
// entries of the same name), the socket and /dev/shm mounts, and GPUs; the native sidecar is
// prepended to initContainers; the socket, /dev/shm (and timeline) volumes are added unless the
// spec has volumes of those names. `spec` gives the sidecar's image, resources, engine settings,
// interface, GPUs and RDMA. HorovodJob workers and webhook-injected pods both go through it.
// The trainer's GPUs, visible to the sidecar too (CUDA IPC needs both processes on the devices):
// the Dynamic Resource Allocation claims the trainer names are named by the sidecar as well;
// without claims, spec.worker.gpus from the device plugin are the trainer's alone and the sidecar
// gets NVIDIA_VISIBLE_DEVICES=all (docs/adr/0012-gpus-shared-by-trainer-and-sidecar.md).
void ShareTrainerDevices(const nlohmann::json& trainer, const HorovodJobSpec& spec,
                         nlohmann::json& sidecar);

void ConfigureWorkerPodSpec(nlohmann::json& pod_spec, int trainer_index, const HorovodJobSpec& spec,
                            const WorkerIdentity& id, const OperatorSettings& settings);

// Requires a job that passed Validate (it has a trainer container).
nlohmann::json BuildWorkerPod(const HorovodJob& job, int64_t index, int64_t epoch,
                              const OperatorSettings& settings,
                              const std::string& elastic_rendezvous = "");

}  // namespace korovod::k8s_operator
