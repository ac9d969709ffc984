#include "operator/api/types.h"

#include <cstddef>

namespace korovod::k8s_operator {

std::string_view Name(CleanPodPolicy v) { return kCleanPodPolicyNames[static_cast<size_t>(v)]; }
std::string_view Name(GangProvider v) { return kGangProviderNames[static_cast<size_t>(v)]; }
std::string_view Name(JobPhase v) { return kJobPhaseNames[static_cast<size_t>(v)]; }
std::string_view Name(ConditionStatus v) { return kConditionStatusNames[static_cast<size_t>(v)]; }
std::string_view Name(WorkerState v) { return kWorkerStateNames[static_cast<size_t>(v)]; }

}  // namespace korovod::k8s_operator
