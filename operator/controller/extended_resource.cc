#include "operator/controller/extended_resource.h"

namespace korovod::k8s_operator {

void SetExtendedResource(nlohmann::json& resources, const std::string& name, int64_t count) {
  if (!resources.is_object()) resources = nlohmann::json::object();
  if (!resources.contains("limits") || !resources["limits"].is_object()) {
    resources["limits"] = nlohmann::json::object();
  }
  resources["limits"][name] = std::to_string(count);
  if (resources.contains("requests") && resources["requests"].is_object() &&
      resources["requests"].contains(name)) {
    resources["requests"][name] = std::to_string(count);
  }
}

}  // namespace korovod::k8s_operator
