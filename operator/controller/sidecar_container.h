// The korovod sidecar of one worker, as a native sidecar (an init container with
// restartPolicy: Always): it starts before the trainer, stays up while the trainer runs, and the
// pod still completes when the trainer exits. It hosts the collective engine, so it gets the
// world's rendezvous address, the job key, the network devices (RDMA) and the hardening.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"
#include "operator/controller/worker_identity.h"

namespace korovod::k8s_operator {

// `spec` supplies the image, resources, engine settings, interface and RDMA; `id` the world.
nlohmann::json BuildSidecarContainer(const HorovodJobSpec& spec, const WorkerIdentity& id,
                                     const OperatorSettings& settings);

// settings.socket_dir + "/sidecar.sock"; a pod of several ranks: "/sidecar-{local_rank}.sock",
// which the sidecar and korovod-local-ranks resolve per local rank.
std::string SocketPath(const OperatorSettings& settings, const WorkerIdentity& id);

// What the sidecar and the trainer of a pod of several ranks also need: KOROVOD_SIDECAR_RANKS,
// KOROVOD_LOCAL_SIZE (both the pod's ranks), KOROVOD_CROSS_RANK (the pod's index) and
// KOROVOD_CROSS_SIZE (the workers).
nlohmann::json LocalRanksEnv(const WorkerIdentity& id);

// The directory the sidecar writes spec.sidecar.engine.timeline into, when it needs a writable
// volume there (its root filesystem is read-only); "" when no extra volume is needed.
std::string TimelineDirectory(const HorovodJobSpec& spec, const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
