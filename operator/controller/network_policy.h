// The worker NetworkPolicy "<job>-workers" (opt-in: --worker-network-policy): a HorovodJob's
// worker pods accept connections only from the same job's worker pods and from the operator's
// pods (by label, in the operator's namespace). It covers every port, not a list: the data port
// of each sidecar is ephemeral (exchanged at rendezvous), the coordinator and metrics ports are
// the operator's flags, torch's store (MASTER_PORT, torch_env.h) is the user's to move. A
// NetworkPolicy cannot say "pods with my job-name label", so each job gets its own, as a child
// (owner reference, the children's labels; deleted with the job). Policies are additive: a cluster
// that scrapes the sidecars' metrics from elsewhere (e.g. Prometheus) adds a policy of its own
// allowing that.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

std::string WorkerNetworkPolicyName(const HorovodJob& job);

// Requires settings.worker_network_policy.enabled().
nlohmann::json BuildWorkerNetworkPolicy(const HorovodJob& job, const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
