#include "common/json_read.h"

namespace korovod {

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

std::string StringAt(const nlohmann::json& root, std::initializer_list<std::string_view> path,
                     std::string_view fallback) {
  const nlohmann::json* v = FindPath(root, path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string(fallback);
}

std::optional<int64_t> IntAt(const nlohmann::json& root,
                             std::initializer_list<std::string_view> path) {
  const nlohmann::json* v = FindPath(root, path);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) return std::nullopt;
  return v->get<int64_t>();
}

const nlohmann::json& ObjectAt(const nlohmann::json& root,
                               std::initializer_list<std::string_view> path) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json* v = FindPath(root, path);
  return v != nullptr && v->is_object() ? *v : kEmpty;
}

bool Has(const nlohmann::json& root, std::initializer_list<std::string_view> path) {
  const nlohmann::json* v = FindPath(root, path);
  return v != nullptr && !v->is_null();
}

}  // namespace korovod
