// Non-throwing reads of untrusted JSON (objects from the Kubernetes API server, AdmissionReviews):
// a missing field or one of the wrong type reads as absent. nlohmann::json throws on a bad typed
// access, and the threads that read these objects (informers, the reconciler, the webhook) must
// not throw. Vocabulary-free: it knows JSON, not Kubernetes. Library korovod_json_read.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace korovod {

// The value at the path of object keys, or nullptr when a step is missing or not an object.
// An empty path is `root` itself.
const nlohmann::json* FindPath(const nlohmann::json& root,
                               std::initializer_list<std::string_view> path);

// The string at the path, or `fallback` when absent or not a string.
std::string StringAt(const nlohmann::json& root, std::initializer_list<std::string_view> path,
                     std::string_view fallback = "");

// The integer at the path, or nullopt when absent, not an integer or above INT64_MAX.
std::optional<int64_t> IntAt(const nlohmann::json& root,
                             std::initializer_list<std::string_view> path);

// The object at the path, or an empty object when absent or not an object.
const nlohmann::json& ObjectAt(const nlohmann::json& root,
                               std::initializer_list<std::string_view> path);

// True when the path names a non-null value.
bool Has(const nlohmann::json& root, std::initializer_list<std::string_view> path);

}  // namespace korovod
