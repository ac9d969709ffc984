// What the reconciler needs to know about one observed worker pod: its identity (replica index
// and epoch from its labels), whether it is active, succeeded or failed, ready, and, when it
// failed, a cause a user can act on ("container \"trainer\" exited with code 137 (OOMKilled)");
// whether the control plane took it away (DisruptionTarget), and when its deletion's grace ends.
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
  // metadata.deletionTimestamp in seconds since the epoch: the API server sets it to the delete's
  // time plus the grace period, so it is when the kubelet should be done. nullopt when absent or
  // malformed.
  std::optional<int64_t> deletion_unix;
  std::string phase;  // status.phase ("" when unknown)
  WorkerOutcome outcome = WorkerOutcome::kActive;
  bool running = false;  // phase Running and the trainer has not terminated
  bool ready = false;    // the PodReady condition is True
  std::string cause;     // kFailed: why
  // The DisruptionTarget condition is True: the control plane preempted, evicted or deleted the
  // pod (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager, DeletionByPodGC,
  // TerminationByKubelet). Its end is then no fault of the job's, whatever its outcome.
  bool disrupted = false;
  std::string disruption;  // disrupted: "<reason>: <message>" of that condition
  // Why the pod cannot start, when it says so: a container waiting with a reason that does not
  // pass by itself (ImagePullBackOff, ErrImagePull, CreateContainerConfigError,
  // InvalidImageName; for an init or native sidecar container also CrashLoopBackOff), or the
  // PodScheduled condition False with reason Unschedulable. Only for an active, non-terminating
  // pod; otherwise empty. Without it such a pod just sits Pending and the job says nothing.
  std::string not_starting_reason;  // the Kubernetes reason, e.g. "ImagePullBackOff"
  std::string not_starting;         // "container \"trainer\": ImagePullBackOff: <message>"
};

// Classifies a pod: Succeeded when phase Succeeded or the trainer exited 0; Failed when phase
// Failed or the trainer exited non-zero; otherwise active (Pending/Running/Unknown). Reads its
// DisruptionTarget condition and deletionTimestamp, and why an active pod cannot start.
WorkerPodState ObserveWorkerPod(const nlohmann::json& pod, std::string_view trainer_container);

}  // namespace korovod::k8s_operator
