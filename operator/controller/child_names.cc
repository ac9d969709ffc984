#include "operator/controller/child_names.h"

namespace korovod::k8s_operator {

std::string ServiceName(const HorovodJob& job) { return job.metadata.name; }
std::string WorldConfigMapName(const HorovodJob& job) { return job.metadata.name + "-world"; }
std::string JobKeySecretName(const HorovodJob& job) { return job.metadata.name + "-key"; }
std::string PodGroupName(const HorovodJob& job) { return job.metadata.name; }

std::string WorkerPodName(const HorovodJob& job, int64_t index) {
  return job.metadata.name + "-worker-" + std::to_string(index);
}

std::string WorkerHost(const HorovodJob& job, int64_t index, const OperatorSettings& settings) {
  return WorkerPodName(job, index) + "." + ServiceName(job) + "." + job.metadata.namespace_name +
         ".svc." + settings.cluster_domain;
}

std::string CoordinatorAddress(const HorovodJob& job, const OperatorSettings& settings) {
  return WorkerHost(job, 0, settings) + ":" +
         std::to_string(JobWorkerPorts(job, 0, settings).coordinator);
}

WorkerPorts JobWorkerPorts(const HorovodJob& job, int64_t index, const OperatorSettings& settings) {
  return PortsFor(job.metadata.uid.empty() ? job.metadata.namespace_name + "/" + job.metadata.name
                                           : job.metadata.uid,
                  index, job.spec.networking.host_network, settings);
}

}  // namespace korovod::k8s_operator
