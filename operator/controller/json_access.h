// Reads of untrusted JSON (objects from the API server) that never throw: a missing field or one
// of the wrong type reads as absent. nlohmann::json throws on a bad access; nothing in the
// reconciler may let an exception escape.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace korovod::op {

// The value at the path of object keys, or nullptr when a step is missing or not an object.
const nlohmann::json* FindPath(const nlohmann::json& root,
                               std::initializer_list<std::string_view> path);

// The string at the path, or "" when absent or not a string.
std::string StringAt(const nlohmann::json& root, std::initializer_list<std::string_view> path);

// The integer at the path, or nullopt when absent or not an integer.
std::optional<int64_t> IntAt(const nlohmann::json& root,
                             std::initializer_list<std::string_view> path);

// True when the path names a non-null value.
bool Has(const nlohmann::json& root, std::initializer_list<std::string_view> path);

// The label's value, or "" (labels live at metadata.labels).
std::string LabelOf(const nlohmann::json& object, std::string_view key);

}  // namespace korovod::op
