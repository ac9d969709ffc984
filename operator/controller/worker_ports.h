// WorkerPorts: the ports a worker's sidecar listens on (its data port is ephemeral and exchanged
// at rendezvous, so it needs none here).
//
// In the pod's own network namespace the operator's fixed ports (--coordinator-port,
// --sidecar-metrics-port) serve every pod. Under hostNetwork the pods share the node's ports with
// each other, with other jobs and with the node's daemons: a fixed metrics port would be a
// hostPort (one worker per node) and every job's rank 0 would want the same coordinator port.
// There each world takes a block of the range [host_network_port_min, host_network_port_max],
// placed by a hash of its identity (a job's uid): the coordinator at the block's base, worker
// i's metrics at base + 1 + i (wrapping inside the range). The pod builder declares them as
// containerPorts, which hostNetwork turns into hostPorts, so the scheduler never puts two pods
// wanting one port on a node: a hash collision between two jobs costs placement freedom, never
// a failed bind. torch.distributed's store (torch_env.h) is rank 0's trainer's: in the pod's
// network torchrun's 29500; under hostNetwork the port below the block's base (the block grows
// upward).
#pragma once

#include <cstdint>
#include <string_view>

#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

// torchrun's default MASTER_PORT: where rank 0's trainer serves torch.distributed's TCPStore.
inline constexpr int kTorchStorePort = 29500;

struct WorkerPorts {
  int coordinator = 0;  // rank 0 listens here; every rank dials it
  int metrics = 0;      // this worker's /metrics, /healthz, /readyz
  int torch_store = 0;  // MASTER_PORT: rank 0's trainer serves torch.distributed's store here
};

// `world_id` names the world uniquely and stably (a HorovodJob's uid, an injected workload's
// namespace/kind/name).
WorkerPorts PortsFor(std::string_view world_id, int64_t rank, bool host_network,
                     const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
