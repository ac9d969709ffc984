#include "operator/api/conditions.h"

#include "common/rfc3339.h"

namespace korovod::k8s_operator {

const Condition* FindCondition(const std::vector<Condition>& conditions, std::string_view type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool SetCondition(std::vector<Condition>& conditions, std::string_view type, ConditionStatus status,
                  std::string_view reason, std::string_view message, int64_t generation,
                  std::chrono::system_clock::time_point now) {
  for (Condition& c : conditions) {
    if (c.type != type) continue;
    bool changed = false;
    if (c.status != status) {
      c.status = status;
      c.last_transition_time = FormatRfc3339(now);
      changed = true;
    }
    if (c.reason != reason) {
      c.reason = std::string(reason);
      changed = true;
    }
    if (c.message != message) {
      c.message = std::string(message);
      changed = true;
    }
    if (c.observed_generation != generation) {
      c.observed_generation = generation;
      changed = true;
    }
    return changed;
  }
  conditions.push_back(Condition{std::string(type), status, generation, FormatRfc3339(now),
                                 std::string(reason), std::string(message)});
  return true;
}

}  // namespace korovod::k8s_operator
