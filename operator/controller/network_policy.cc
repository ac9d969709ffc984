#include "operator/controller/network_policy.h"

#include "operator/controller/child_metadata.h"

namespace korovod::k8s_operator {

std::string WorkerNetworkPolicyName(const HorovodJob& job) {
  return job.metadata.name + "-workers";
}

nlohmann::json BuildWorkerNetworkPolicy(const HorovodJob& job, const OperatorSettings& settings) {
  using nlohmann::json;
  const WorkerNetworkPolicySettings& np = settings.worker_network_policy;
  const json workers = {{"matchLabels",
                         {{std::string(kLabelJobName), job.metadata.name},
                          {std::string(kLabelRole), std::string(kRoleWorker)}}}};
  json operator_labels = json::object();
  for (const auto& [key, value] : np.operator_pod_labels) operator_labels[key] = value;
  // One peer with both selectors: the operator's pods in the operator's namespace (two peers
  // would admit every pod of that namespace, and pods with those labels anywhere).
  const json the_operator = {
      {"namespaceSelector",
       {{"matchLabels", {{"kubernetes.io/metadata.name", np.operator_namespace}}}}},
      {"podSelector", {{"matchLabels", std::move(operator_labels)}}}};
  return json{
      {"apiVersion", "networking.k8s.io/v1"},
      {"kind", "NetworkPolicy"},
      {"metadata", ChildMetadata(job, WorkerNetworkPolicyName(job))},
      {"spec",
       {{"podSelector", workers},
        {"policyTypes", json::array({"Ingress"})},
        {"ingress",
         json::array({{{"from", json::array({{{"podSelector", workers}}, the_operator})}}})}}}};
}

}  // namespace korovod::k8s_operator
