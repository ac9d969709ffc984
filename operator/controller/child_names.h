// The names and DNS addresses of a job's children. Rank i always lives in pod
// "<job>-worker-<i>", reachable through the headless Service "<job>" as
// "<job>-worker-<i>.<job>.<ns>.svc.<domain>"; rank 0 hosts the coordinator.
#pragma once

#include <cstdint>
#include <string>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"
#include "operator/controller/worker_ports.h"

namespace korovod::k8s_operator {

std::string ServiceName(const HorovodJob& job);
std::string WorldConfigMapName(const HorovodJob& job);
std::string JobKeySecretName(const HorovodJob& job);
std::string PodGroupName(const HorovodJob& job);
std::string WorkerPodName(const HorovodJob& job, int64_t index);

// "<job>-worker-<i>.<job>.<ns>.svc.<domain>"
std::string WorkerHost(const HorovodJob& job, int64_t index, const OperatorSettings& settings);
// WorkerHost(0) + ":" + the job's coordinator port
std::string CoordinatorAddress(const HorovodJob& job, const OperatorSettings& settings);
// Worker `index`'s ports: the operator's fixed ones, or under hostNetwork the job's block
// (worker_ports.h), placed by the job's uid.
WorkerPorts JobWorkerPorts(const HorovodJob& job, int64_t index, const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
