// What the reconciler needs to know about one observed worker pod: its identity (replica index
// and epoch from its labels), whether it is active, succeeded or failed, ready, and, when it
// failed, a cause a user can act on ("container \"trainer\" exited with code 137 (OOMKilled)").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace korovod::k8s_operator {

enum class WorkerOutcome { kActive, kSucceeded, kFailed };

struct WorkerPodState {
  std::string name;
  std::string uid;
  std::optional<int64_t> index;  // korovod.dev/replica-index; nullopt when absent or malformed
  std::optional<int64_t> epoch;  // korovod.dev/epoch; nullopt when absent or malformed
  bool terminating = false;      // metadata.deletionTimestamp is set
  std::string phase;             // status.phase ("" when unknown)
  WorkerOutcome outcome = WorkerOutcome::kActive;
  bool running = false;  // phase Running and the trainer has not terminated
  bool ready = false;    // the PodReady condition is True
  std::string cause;     // kFailed: why
};

// Classifies a pod: Succeeded when phase Succeeded or the trainer exited 0; Failed when phase
// Failed or the trainer exited non-zero; otherwise active (Pending/Running/Unknown).
WorkerPodState ObserveWorkerPod(const nlohmann::json& pod, std::string_view trainer_container);

}  // namespace korovod::k8s_operator
