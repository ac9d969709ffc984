// The worker pod of rank `index` in `epoch`: spec.template with the trainer wired to its sidecar
// (env, socket and /dev/shm volumes, GPUs), the native sidecar prepended to initContainers, the
// DNS identity under the headless Service, and the scheduling/networking policy applied.
// Precedence: korovod's own env, labels and restartPolicy win over the template; the template
// wins for any other env var and for volumes/mounts it already defines (same name or path).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"

namespace korovod::op {

// Requires a job that passed Validate (it has a trainer container).
nlohmann::json BuildWorkerPod(const HorovodJob& job, int64_t index, int64_t epoch,
                              const OperatorSettings& settings);

}  // namespace korovod::op
