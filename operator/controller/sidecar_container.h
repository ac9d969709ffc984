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

// settings.socket_dir + "/sidecar.sock"
std::string SocketPath(const OperatorSettings& settings);

// The directory the sidecar writes spec.sidecar.engine.timeline into, when it needs a writable
// volume there (its root filesystem is read-only); "" when no extra volume is needed.
std::string TimelineDirectory(const HorovodJobSpec& spec, const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
