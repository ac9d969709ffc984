// Where each kind of object the operator writes lives in the REST API, from its apiVersion and
// kind (the reconciler's actions carry only those).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "operator/kube/resource.h"
#include "common/status.h"

namespace korovod::k8s_operator {

inline const kube::ResourceRef kHorovodJobs{"korovod.dev", "v1alpha1", "horovodjobs", true};
// Kueue's (kueue.x-k8s.io v1beta2, kueue_workload.h) and the PriorityClasses a Workload names.
inline const kube::ResourceRef kWorkloads{"kueue.x-k8s.io", "v1beta2", "workloads", true};
inline const kube::ResourceRef kResourceFlavors{"kueue.x-k8s.io", "v1beta2", "resourceflavors",
                                                false};
inline const kube::ResourceRef kWorkloadPriorityClasses{"kueue.x-k8s.io", "v1beta2",
                                                        "workloadpriorityclasses", false};
inline const kube::ResourceRef kPriorityClasses{"scheduling.k8s.io", "v1", "priorityclasses",
                                                false};

// Pod, Service, ConfigMap, Secret (v1), PodGroup (any group: volcano, scheduler-plugins),
// Workload (kueue.x-k8s.io), HorovodJob. Others: InvalidArgument naming the apiVersion and kind.
StatusOr<kube::ResourceRef> ResourceOf(const std::string& api_version, const std::string& kind);

// The REST path of `object` (apiVersion, kind, metadata.namespace, metadata.name).
StatusOr<std::string> ObjectPath(const nlohmann::json& object);

// "Pod default/x" for logs and errors.
std::string Describe(const nlohmann::json& object);

}  // namespace korovod::k8s_operator
