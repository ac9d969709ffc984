#include "operator/controller/child_metadata.h"

namespace korovod::k8s_operator {

std::map<std::string, std::string> CommonLabels(const HorovodJob& job) {
  return {{std::string(kLabelJobName), job.metadata.name},
          {std::string(kLabelManagedBy), std::string(kManagedByValue)}};
}

nlohmann::json ControllerOwnerReference(const HorovodJob& job) {
  return nlohmann::json{{"apiVersion", std::string(kApiVersion)},
                        {"kind", std::string(kKind)},
                        {"name", job.metadata.name},
                        {"uid", job.metadata.uid},
                        {"controller", true},
                        {"blockOwnerDeletion", true}};
}

nlohmann::json ChildMetadata(const HorovodJob& job, const std::string& name) {
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : CommonLabels(job)) labels[k] = v;
  return nlohmann::json{
      {"name", name},
      {"namespace", job.metadata.namespace_name},
      {"labels", std::move(labels)},
      {"ownerReferences", nlohmann::json::array({ControllerOwnerReference(job)})}};
}

}  // namespace korovod::k8s_operator
