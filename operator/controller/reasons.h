// Condition and event reasons the reconciler sets (CamelCase, stable: users and alerts match on
// them). Spec validation reasons live in operator/api/validate.h.
#pragma once

#include <string_view>

namespace korovod::k8s_operator {

// The object failed HorovodJobFromJson (schema-level problem that bypassed admission).
inline constexpr std::string_view kReasonInvalidSpec = "InvalidSpec";
// A previously invalid spec was fixed: the job starts over.
inline constexpr std::string_view kReasonSpecCorrected = "SpecCorrected";
inline constexpr std::string_view kReasonWorkersCreated = "WorkersCreated";
inline constexpr std::string_view kReasonAllWorkersRunning = "AllWorkersRunning";
inline constexpr std::string_view kReasonWorkerFailed = "WorkerFailed";
// A worker was preempted, evicted or deleted by the control plane (DisruptionTarget=True): the
// world restarts, but restartCount and backoffLimit are untouched.
inline constexpr std::string_view kReasonWorkerDisrupted = "WorkerDisrupted";
// A pod terminating long past its grace period (lost node) was deleted with grace period 0.
inline constexpr std::string_view kReasonTerminatingPodForceDeleted = "TerminatingPodForceDeleted";
inline constexpr std::string_view kReasonRecovered = "Recovered";
// spec.replicas changed while the job ran: a new epoch at the new size (not a restart).
inline constexpr std::string_view kReasonWorldResized = "WorldResized";
inline constexpr std::string_view kReasonBackoffLimitExceeded = "BackoffLimitExceeded";
inline constexpr std::string_view kReasonDeadlineExceeded = "DeadlineExceeded";
// An epoch's workers did not all come up within spec.runPolicy.startupTimeoutSeconds.
inline constexpr std::string_view kReasonStartupTimeout = "StartupTimeout";
inline constexpr std::string_view kReasonAllWorkersSucceeded = "AllWorkersSucceeded";
inline constexpr std::string_view kReasonSuspended = "JobSuspended";
inline constexpr std::string_view kReasonResumed = "JobResumed";
// Kueue: the job waits in its LocalQueue for its Workload's admission; Kueue evicted it
// (preemption, a deactivated Workload); Kueue admitted it.
inline constexpr std::string_view kReasonQueued = "Queued";
inline constexpr std::string_view kReasonEvictedByKueue = "EvictedByKueue";
inline constexpr std::string_view kReasonAdmitted = "AdmittedByKueue";
inline constexpr std::string_view kReasonTtlExpired = "TTLExpired";
// The Warning event when a worker pod is first seen unable to start. The WorkersNotStarting
// condition itself carries the Kubernetes reason (ImagePullBackOff, ErrImagePull,
// CreateContainerConfigError, InvalidImageName, CrashLoopBackOff, Unschedulable), which users
// already know and match on.
inline constexpr std::string_view kReasonWorkersNotStarting = "WorkersNotStarting";
// The caller passed no usable fresh key while the key Secret had to be created.
inline constexpr std::string_view kReasonJobKeyUnavailable = "JobKeyUnavailable";

// The executor could not create a child (a quota, Pod Security, a webhook's denial): the event
// carries the API server's message, as the Job controller's FailedCreate does.
inline constexpr std::string_view kReasonFailedCreate = "FailedCreate";

// Elastic jobs (spec.elastic).
inline constexpr std::string_view kReasonMembershipChanged = "MembershipChanged";
inline constexpr std::string_view kReasonWorkerLost = "WorkerLost";
inline constexpr std::string_view kReasonElasticFailed = "ElasticMembershipFailed";
inline constexpr std::string_view kReasonElasticWorkerSucceeded = "ElasticWorkerSucceeded";

inline constexpr std::string_view kEventNormal = "Normal";
inline constexpr std::string_view kEventWarning = "Warning";

}  // namespace korovod::k8s_operator
