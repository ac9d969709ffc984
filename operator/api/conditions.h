// Status conditions in the metav1.Condition shape, with the standard lastTransitionTime rule:
// the time changes only when the condition's status flips (or the condition first appears).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "operator/api/types.h"

namespace korovod::k8s_operator {

// Condition types the operator sets on a HorovodJob.
inline constexpr std::string_view kConditionSpecValid = "SpecValid";
inline constexpr std::string_view kConditionCreated = "Created";
inline constexpr std::string_view kConditionRunning = "Running";
inline constexpr std::string_view kConditionRestarting = "Restarting";
inline constexpr std::string_view kConditionSucceeded = "Succeeded";
inline constexpr std::string_view kConditionFailed = "Failed";
inline constexpr std::string_view kConditionSuspended = "Suspended";
// A worker pod of the current epoch cannot start (image pull, config, crash-looping sidecar,
// unschedulable). Reported only: the job's deadline and backoff policy decide its fate.
inline constexpr std::string_view kConditionWorkersNotStarting = "WorkersNotStarting";

// The condition of this type, or nullptr.
const Condition* FindCondition(const std::vector<Condition>& conditions, std::string_view type);

// Adds or updates the condition of `type`. lastTransitionTime becomes `now` only when the
// condition is new or its status changes; reason, message and observedGeneration always follow.
// Returns true when anything changed (so the caller knows a status write is due).
bool SetCondition(std::vector<Condition>& conditions, std::string_view type, ConditionStatus status,
                  std::string_view reason, std::string_view message, int64_t generation,
                  std::chrono::system_clock::time_point now);

}  // namespace korovod::k8s_operator
