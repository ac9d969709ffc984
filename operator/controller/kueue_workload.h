// Kueue: a HorovodJob labelled kueue.x-k8s.io/queue-name waits in that LocalQueue. The operator
// plays the part Kueue's jobframework plays for its built-in Job kinds (HorovodJob is an
// "external framework" to Kueue): it creates one Workload per job, owned by it, whose single
// PodSet is the worker pod (sidecar included, so the quota counts what the pods really request);
// the job's pods exist only while the Workload is admitted, carrying the admitted flavors' node
// labels and tolerations; an eviction (preemption, a deactivated Workload) stops the job as a
// suspend does (not a failure) and hands the quota back by clearing the Workload's reservation;
// the job's end marks the Workload Finished so Kueue releases its quota.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kKueueQueueNameLabel = "kueue.x-k8s.io/queue-name";
inline constexpr std::string_view kKueueJobUidLabel = "kueue.x-k8s.io/job-uid";
// v1beta2: Kueue's storage and preferred version since v0.15 (v1beta1 needs its conversion
// webhook).
inline constexpr std::string_view kWorkloadApiVersion = "kueue.x-k8s.io/v1beta2";
inline constexpr std::string_view kResourceFlavorApiVersion = "kueue.x-k8s.io/v1beta2";
// A WorkloadPriorityClass for the job's Workload (Kueue's own priorities), else its
// priorityClassName's PriorityClass.
inline constexpr std::string_view kKueuePriorityClassLabel = "kueue.x-k8s.io/priority-class";
// What Kueue's jobframework puts on the pods of an admitted job.
inline constexpr std::string_view kKueuePodSetLabel = "kueue.x-k8s.io/podset";
inline constexpr std::string_view kKueueWorkloadAnnotation = "kueue.x-k8s.io/workload";
inline constexpr std::string_view kWorkloadKind = "Workload";
inline constexpr std::string_view kResourceFlavorKind = "ResourceFlavor";
inline constexpr std::string_view kWorkerPodSetName = "worker";

// The job's LocalQueue, or "" when Kueue does not manage it.
std::string QueueName(const HorovodJob& job);

// "horovodjob-<job>-<first 5 of the uid>": unique per job incarnation, at most 63 characters.
std::string WorkloadName(const HorovodJob& job);

// The priority class a Workload of this job names: {"kind", "name"} of the job's
// kueue.x-k8s.io/priority-class label (a WorkloadPriorityClass) or of its
// schedulingPolicy.priorityClassName (a PriorityClass); null when neither is set.
nlohmann::json WorkloadPriorityClassOf(const HorovodJob& job);

// The Workload Kueue admits the job through: queueName, the priority (`priority`: {group, kind,
// name, value}, or null), and one PodSet "worker" of spec.replicas pods whose template is the
// worker pod as the operator builds it.
nlohmann::json BuildWorkload(const HorovodJob& job, const nlohmann::json& priority,
                             const OperatorSettings& settings);

// What the reconciler needs from the job's Workload.
struct WorkloadState {
  bool matches = false;         // its queue and PodSet (count, template) are the job's current ones
  bool quota_reserved = false;  // status.admission is set (QuotaReserved=True)
  bool admitted = false;        // Admitted=True and not Evicted=True
  bool evicted = false;         // Evicted=True: the job must stop and give the quota back
  std::string evicted_reason;   // "Preempted", "InactiveWorkload", ...
  std::string evicted_message;
  bool finished = false;  // Finished=True (the operator wrote it)
  // The ResourceFlavors status.admission assigned to the worker PodSet, sorted, unique.
  std::vector<std::string> flavors;
};

WorkloadState ObserveWorkload(const nlohmann::json& workload, const HorovodJob& job,
                              const OperatorSettings& settings);

// Adds the admitted flavors' spec.nodeLabels to the pod template's nodeSelector and their
// spec.tolerations to its tolerations, as Kueue does for its own Job kinds. A label the
// template already selects with another value is left as the template has it.
void ApplyFlavors(nlohmann::json& pod_template, const std::vector<nlohmann::json>& flavors);

// The Workload with one more condition set (type, status, reason, message, at `now_unix`), and
// when `clear_admission` its admission removed, QuotaReserved False (reason Pending) and Admitted
// False (NoReservation), the admitted time added to accumulatedPastExecutionTimeSeconds: what
// Kueue's jobframework writes to hand the quota back after an eviction (with Requeued) or to mark
// the job's end (Finished).
nlohmann::json WorkloadWithCondition(const nlohmann::json& workload, std::string_view type,
                                     bool value, std::string_view reason,
                                     const std::string& message, int64_t now_unix,
                                     bool clear_admission);

}  // namespace korovod::k8s_operator
