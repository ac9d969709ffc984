#include "operator/controller/worker_pod_state.h"

#include <charconv>
#include <chrono>

#include "common/rfc3339.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/json_access.h"

namespace korovod::k8s_operator {
namespace {

std::optional<int64_t> ParseNonNegative(const std::string& s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// status.containerStatuses[name == container].state.terminated, or nullptr.
const nlohmann::json* TrainerTermination(const nlohmann::json& pod, std::string_view container) {
  const nlohmann::json* statuses = FindPath(pod, {"status", "containerStatuses"});
  if (statuses == nullptr || !statuses->is_array()) return nullptr;
  for (const nlohmann::json& s : *statuses) {
    if (StringAt(s, {"name"}) != container) continue;
    const nlohmann::json* terminated = FindPath(s, {"state", "terminated"});
    return terminated != nullptr && terminated->is_object() ? terminated : nullptr;
  }
  return nullptr;
}

// status.conditions[type == type], or nullptr.
const nlohmann::json* PodCondition(const nlohmann::json& pod, std::string_view type) {
  const nlohmann::json* conditions = FindPath(pod, {"status", "conditions"});
  if (conditions == nullptr || !conditions->is_array()) return nullptr;
  for (const nlohmann::json& c : *conditions) {
    if (StringAt(c, {"type"}) == type) return &c;
  }
  return nullptr;
}

bool PodReady(const nlohmann::json& pod) {
  const nlohmann::json* ready = PodCondition(pod, "Ready");
  return ready != nullptr && StringAt(*ready, {"status"}) == "True";
}

// Waiting reasons after which a container does not start without someone acting (fixing the
// image, the pull secret, a referenced ConfigMap/Secret key). ContainerCreating and
// PodInitializing pass by themselves and are not reported.
bool BlockingWaitingReason(std::string_view reason, bool init_container) {
  if (reason == "ImagePullBackOff" || reason == "ErrImagePull" ||
      reason == "CreateContainerConfigError" || reason == "InvalidImageName") {
    return true;
  }
  // Worker pods never restart their regular containers (a trainer exit is the pod's end), so a
  // crash loop can only be an init or native sidecar container the kubelet keeps restarting.
  return init_container && reason == "CrashLoopBackOff";
}

// The first container of status.<field> waiting with a blocking reason: sets the pod's
// not_starting fields and returns true.
bool FindBlockedContainer(const nlohmann::json& pod, const char* field, bool init_container,
                          WorkerPodState& s) {
  const nlohmann::json* statuses = FindPath(pod, {"status", field});
  if (statuses == nullptr || !statuses->is_array()) return false;
  for (const nlohmann::json& c : *statuses) {
    const std::string reason = StringAt(c, {"state", "waiting", "reason"});
    if (!BlockingWaitingReason(reason, init_container)) continue;
    s.not_starting_reason = reason;
    s.not_starting = std::string(init_container ? "init container" : "container") + " \"" +
                     StringAt(c, {"name"}) + "\": " + reason;
    const std::string message = StringAt(c, {"state", "waiting", "message"});
    if (!message.empty()) s.not_starting += ": " + message;
    return true;
  }
  return false;
}

std::optional<int64_t> DeletionUnix(const nlohmann::json& pod) {
  const auto t = ParseRfc3339(StringAt(pod, {"metadata", "deletionTimestamp"}));
  if (!t.ok()) return std::nullopt;
  return std::chrono::floor<std::chrono::seconds>(t.value().time_since_epoch()).count();
}

}  // namespace

WorkerPodState ObserveWorkerPod(const nlohmann::json& pod, std::string_view trainer_container) {
  WorkerPodState s;
  s.name = StringAt(pod, {"metadata", "name"});
  s.uid = StringAt(pod, {"metadata", "uid"});
  s.index = ParseNonNegative(LabelOf(pod, kLabelReplicaIndex));
  s.epoch = ParseNonNegative(LabelOf(pod, kLabelEpoch));
  s.terminating = Has(pod, {"metadata", "deletionTimestamp"});
  if (s.terminating) s.deletion_unix = DeletionUnix(pod);
  s.phase = StringAt(pod, {"status", "phase"});
  s.ready = PodReady(pod);
  if (const nlohmann::json* d = PodCondition(pod, "DisruptionTarget");
      d != nullptr && StringAt(*d, {"status"}) == "True") {
    s.disrupted = true;
    s.disruption = StringAt(*d, {"reason"});
    if (s.disruption.empty()) s.disruption = "DisruptionTarget";
    const std::string message = StringAt(*d, {"message"});
    if (!message.empty()) s.disruption += ": " + message;
  }

  const nlohmann::json* terminated = TrainerTermination(pod, trainer_container);
  // -1: the trainer has not terminated (or reported no exit code).
  int64_t exit_code = -1;
  if (terminated != nullptr) exit_code = IntAt(*terminated, {"exitCode"}).value_or(-1);
  const std::string container = "container \"" + std::string(trainer_container) + "\"";
  if (exit_code > 0) {
    s.outcome = WorkerOutcome::kFailed;
    s.cause = container + " exited with code " + std::to_string(exit_code);
    const std::string reason = StringAt(*terminated, {"reason"});
    if (!reason.empty()) s.cause += " (" + reason + ")";
    const std::string message = StringAt(*terminated, {"message"});
    if (!message.empty()) s.cause += ": " + message;
  } else if (s.phase == "Failed") {
    s.outcome = WorkerOutcome::kFailed;
    const std::string reason = StringAt(pod, {"status", "reason"});
    const std::string message = StringAt(pod, {"status", "message"});
    s.cause = "pod phase Failed";
    if (!reason.empty()) s.cause += " (" + reason + ")";
    if (!message.empty()) s.cause += ": " + message;
  } else if (s.phase == "Succeeded" || exit_code == 0) {
    s.outcome = WorkerOutcome::kSucceeded;
  } else {
    s.outcome = WorkerOutcome::kActive;
    s.running = s.phase == "Running";
  }
  if (s.outcome == WorkerOutcome::kActive && !s.terminating) {
    // Init containers first: the regular ones wait on them (PodInitializing) until they start.
    if (!FindBlockedContainer(pod, "initContainerStatuses", true, s) &&
        !FindBlockedContainer(pod, "containerStatuses", false, s)) {
      if (const nlohmann::json* scheduled = PodCondition(pod, "PodScheduled");
          scheduled != nullptr && StringAt(*scheduled, {"status"}) == "False" &&
          StringAt(*scheduled, {"reason"}) == "Unschedulable") {
        s.not_starting_reason = "Unschedulable";
        s.not_starting = "Unschedulable";
        const std::string message = StringAt(*scheduled, {"message"});
        if (!message.empty()) s.not_starting += ": " + message;
      }
    }
  }
  return s;
}

}  // namespace korovod::k8s_operator
