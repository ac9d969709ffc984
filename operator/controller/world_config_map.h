// The ConfigMap "<job>-world": the current epoch's membership (epoch, size, coordinator, ordered
// member hosts), for humans and tools; the pods get the same facts through their environment.
// It is never updated in place: when the epoch moves on, the reconciler deletes it and creates
// the new one on a later reconcile, once the old one is gone (actions stay create/delete only).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

nlohmann::json BuildWorldConfigMap(const HorovodJob& job, int64_t epoch,
                                   const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
