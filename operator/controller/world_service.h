// The headless Service "<job>" that gives every worker pod a stable DNS name
// ("<job>-worker-<i>.<job>.<ns>.svc...") through the pods' hostname/subdomain. Not-ready
// addresses are published because ranks rendezvous before any sidecar reports ready.
#pragma once

#include <nlohmann/json.hpp>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

nlohmann::json BuildWorldService(const HorovodJob& job, const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
