#include "operator/controller/json_access.h"

namespace korovod::k8s_operator {

std::string LabelOf(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* labels = FindPath(object, {"metadata", "labels"});
  if (labels == nullptr || !labels->is_object()) return "";
  auto it = labels->find(key);
  return it != labels->end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace korovod::k8s_operator
