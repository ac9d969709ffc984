// Labels and owner references every child of a HorovodJob carries. The job-name label is how the
// executor finds the children (a label selector); the controller ownerReference is what makes
// them this job's (ControlledBy) and how the garbage collector deletes them with the job.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "operator/api/types.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kLabelJobName = "korovod.dev/job-name";
inline constexpr std::string_view kLabelRole = "korovod.dev/role";
inline constexpr std::string_view kLabelReplicaIndex = "korovod.dev/replica-index";
inline constexpr std::string_view kLabelEpoch = "korovod.dev/epoch";
inline constexpr std::string_view kLabelManagedBy = "app.kubernetes.io/managed-by";
inline constexpr std::string_view kManagedByValue = "korovod-operator";
inline constexpr std::string_view kRoleWorker = "worker";

// {korovod.dev/job-name: <job>, app.kubernetes.io/managed-by: korovod-operator}
std::map<std::string, std::string> CommonLabels(const HorovodJob& job);

// {apiVersion: korovod.dev/v1alpha1, kind: HorovodJob, name, uid, controller: true,
//  blockOwnerDeletion: true}
nlohmann::json ControllerOwnerReference(const HorovodJob& job);

// metadata {name, namespace, labels: CommonLabels, ownerReferences: [controller]}.
nlohmann::json ChildMetadata(const HorovodJob& job, const std::string& name);

// Whether `child` has a controller ownerReference with uid `owner_uid`. Labels name the job,
// not its incarnation: a job deleted and recreated under the same name would otherwise adopt
// the old one's children (terminating or orphaned pods, a finished job's Succeeded workers).
// False for an empty `owner_uid`.
bool ControlledBy(const nlohmann::json& child, std::string_view owner_uid);

}  // namespace korovod::k8s_operator
