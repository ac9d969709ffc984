// HorovodJob <-> JSON. FromJson applies the CRD's defaults and rejects what the CRD schema would
// reject, with the JSON path of the bad field in the message ("spec.runPolicy.backoffLimit: must
// be >= 0"), so objects that bypassed admission (older CRD, tests) fail just as clearly.
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/types.h"

namespace korovod::k8s_operator {

StatusOr<HorovodJob> HorovodJobFromJson(const nlohmann::json& object);
StatusOr<HorovodJobSpec> HorovodJobSpecFromJson(const nlohmann::json& spec);
StatusOr<HorovodJobStatus> HorovodJobStatusFromJson(const nlohmann::json& status);

// The status as written to the /status subresource (unset optional fields omitted).
nlohmann::json ToJson(const HorovodJobStatus& status);
nlohmann::json ToJson(const Condition& condition);

}  // namespace korovod::k8s_operator
