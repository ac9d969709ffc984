#include "operator/controller/json_access.h"

namespace korovod::op {

const nlohmann::json* FindPath(const nlohmann::json& root,
                               std::initializer_list<std::string_view> path) {
  const nlohmann::json* at = &root;
  for (std::string_view key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::string StringAt(const nlohmann::json& root, std::initializer_list<std::string_view> path) {
  const nlohmann::json* v = FindPath(root, path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<int64_t> IntAt(const nlohmann::json& root,
                             std::initializer_list<std::string_view> path) {
  const nlohmann::json* v = FindPath(root, path);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) return std::nullopt;
  return v->get<int64_t>();
}

bool Has(const nlohmann::json& root, std::initializer_list<std::string_view> path) {
  const nlohmann::json* v = FindPath(root, path);
  return v != nullptr && !v->is_null();
}

std::string LabelOf(const nlohmann::json& object, std::string_view key) {
  const nlohmann::json* labels = FindPath(object, {"metadata", "labels"});
  if (labels == nullptr || !labels->is_object()) return "";
  auto it = labels->find(key);
  return it != labels->end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace korovod::op
