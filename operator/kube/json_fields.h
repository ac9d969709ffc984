// Non-throwing reads of JSON fields. nlohmann's value() throws when a field has an unexpected
// type; objects from the API server are not trusted to be well-typed on a thread that must not
// throw, so every read of a server object goes through these.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace korovod::kube {

// object[key] when object is an object and the field is a string, else `fallback`.
inline std::string GetString(const nlohmann::json& object, const char* key,
                             const std::string& fallback = "") {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// object[key] when it is an integer, else `fallback`.
inline int64_t GetInt(const nlohmann::json& object, const char* key, int64_t fallback = 0) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

// object[key] when it is an object, else an empty object.
inline const nlohmann::json& GetObject(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  if (!object.is_object()) return kEmpty;
  auto it = object.find(key);
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

}  // namespace korovod::kube
