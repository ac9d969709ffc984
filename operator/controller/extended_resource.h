// Sets an extended resource (nvidia.com/gpu, rdma/hca, ...) on a container's resources.
// Kubernetes requires requests == limits for extended resources and defaults the request to the
// limit, so the limit is set and a request already present (from the template) is aligned.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace korovod::k8s_operator {

// `resources` is a core/v1 ResourceRequirements object (replaced by one when it is not an
// object). Quantities are written as strings, as the API server returns them.
void SetExtendedResource(nlohmann::json& resources, const std::string& name, int64_t count);

}  // namespace korovod::k8s_operator
