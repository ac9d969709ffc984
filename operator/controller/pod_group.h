// The gang-scheduling PodGroup "<job>" (spec.schedulingPolicy.gang): all-or-nothing placement of
// at least minMember workers, so a half-placed world never holds GPUs while waiting. One builder
// per provider's API; the worker pods carry the matching annotation or label.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "operator/api/types.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kVolcanoPodGroupApiVersion = "scheduling.volcano.sh/v1beta1";
inline constexpr std::string_view kSchedulerPluginsPodGroupApiVersion =
    "scheduling.x-k8s.io/v1alpha1";
inline constexpr std::string_view kPodGroupKind = "PodGroup";
// Volcano: pods name their group in this annotation and use this scheduler.
inline constexpr std::string_view kVolcanoGroupNameAnnotation = "scheduling.k8s.io/group-name";
inline constexpr std::string_view kVolcanoSchedulerName = "volcano";
// scheduler-plugins (coscheduling): pods name their group in this label.
inline constexpr std::string_view kSchedulerPluginsPodGroupLabel = "scheduling.x-k8s.io/pod-group";

// The provider's PodGroup apiVersion.
std::string_view PodGroupApiVersion(GangProvider provider);

// Requires spec.schedulingPolicy.gang.enabled with a provider (Validate guarantees it).
// minMember = gang.minAvailable, else replicas.
nlohmann::json BuildPodGroup(const HorovodJob& job);

}  // namespace korovod::k8s_operator
