// torchrun's environment for a worker's trainer, so an unmodified torch.distributed script
// (`dist.init_process_group("korovod")`, env://) runs in a HorovodJob or an injected pod as under
// torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
// MASTER_PORT. MASTER_ADDR:MASTER_PORT is where rank 0's trainer serves torch's own TCPStore: rank
// 0's pod (the host of KOROVOD_COORDINATOR), port 29500 in the pod's network, the job's own port
// under hostNetwork (worker_ports.h). The collectives never use the store: the sidecars meet
// through their own authenticated rendezvous (docs/security.md).
//
// Variables the trainer container's env already sets are left as they are (a user's MASTER_PORT
// wins); ones that come only through envFrom are not seen here and are overridden.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "operator/controller/worker_identity.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kEnvTorchRank = "RANK";
inline constexpr std::string_view kEnvTorchWorldSize = "WORLD_SIZE";
inline constexpr std::string_view kEnvTorchLocalRank = "LOCAL_RANK";
inline constexpr std::string_view kEnvTorchLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr std::string_view kEnvTorchGroupRank = "GROUP_RANK";
inline constexpr std::string_view kEnvTorchMasterAddr = "MASTER_ADDR";
inline constexpr std::string_view kEnvTorchMasterPort = "MASTER_PORT";
// Rank 0's trainer declares the store's port under hostNetwork (a hostPort: the scheduler keeps
// two pods wanting it off one node).
inline constexpr std::string_view kTorchStorePortName = "torch-store";

// The variables for the worker `id`, in torchrun's order:
// - one rank per pod: all seven; RANK is the pod's rank, LOCAL_RANK 0, GROUP_RANK the pod index;
// - several ranks per pod (korovod-local-ranks): WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK and the
//   store; korovod-local-ranks gives each local rank its RANK and LOCAL_RANK;
// - an elastic job (rank and world change by epoch): LOCAL_RANK 0 and LOCAL_WORLD_SIZE 1 only (see
//   docs/operator.md: torch.distributed needs a fixed world).
nlohmann::json TorchDistributedEnv(const WorkerIdentity& id);

// Appends TorchDistributedEnv(id) to the trainer container's env, skipping the names its env
// already has; under hostNetwork, rank 0's trainer also declares the store's port, unless the user
// set MASTER_PORT.
void AddTorchDistributedEnv(nlohmann::json& trainer, const WorkerIdentity& id);

}  // namespace korovod::k8s_operator
