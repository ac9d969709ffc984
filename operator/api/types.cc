#include "operator/api/types.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace korovod::k8s_operator {

std::string_view Name(CleanPodPolicy v) { return kCleanPodPolicyNames[static_cast<size_t>(v)]; }
std::string_view Name(GangProvider v) { return kGangProviderNames[static_cast<size_t>(v)]; }
std::string_view Name(JobPhase v) { return kJobPhaseNames[static_cast<size_t>(v)]; }
std::string_view Name(ConditionStatus v) { return kConditionStatusNames[static_cast<size_t>(v)]; }
std::string_view Name(WorkerState v) { return kWorkerStateNames[static_cast<size_t>(v)]; }

std::string UidDigest(std::string_view uid) {
  uint32_t h = 2166136261u;  // FNV-1a: stable across builds and platforms, unlike std::hash
  for (const char c : uid) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  char out[9];
  std::snprintf(out, sizeof(out), "%08x", static_cast<unsigned>(h));
  return out;
}

}  // namespace korovod::k8s_operator
