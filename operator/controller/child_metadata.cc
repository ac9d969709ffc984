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

bool ControlledBy(const nlohmann::json& child, std::string_view owner_uid) {
  if (owner_uid.empty() || !child.is_object()) return false;
  const auto meta = child.find("metadata");
  if (meta == child.end() || !meta->is_object()) return false;
  const auto refs = meta->find("ownerReferences");
  if (refs == meta->end() || !refs->is_array()) return false;
  for (const nlohmann::json& ref : *refs) {
    if (!ref.is_object()) continue;
    const auto uid = ref.find("uid");
    const auto controller = ref.find("controller");
    if (uid != ref.end() && uid->is_string() && uid->get_ref<const std::string&>() == owner_uid &&
        controller != ref.end() && controller->is_boolean() && controller->get<bool>()) {
      return true;
    }
  }
  return false;
}

}  // namespace korovod::k8s_operator
