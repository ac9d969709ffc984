// Reads of untrusted JSON (objects from the API server) that never throw: a missing field or one
// of the wrong type reads as absent. nlohmann::json throws on a bad access; nothing in the
// reconciler may let an exception escape. The generic path reads (FindPath, StringAt, IntAt,
// ObjectAt, Has) are common/json_read.h, shared with operator/kube; this adds the Kubernetes ones.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/json_read.h"

namespace korovod::k8s_operator {

// The label's value, or "" (labels live at metadata.labels).
std::string LabelOf(const nlohmann::json& object, std::string_view key);

}  // namespace korovod::k8s_operator
