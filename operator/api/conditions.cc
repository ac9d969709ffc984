#include "operator/api/conditions.h"

#include <ctime>

namespace korovod::op {

std::string FormatRfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

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

}  // namespace korovod::op
