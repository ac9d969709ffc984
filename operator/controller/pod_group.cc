#include "operator/controller/pod_group.h"

#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"

namespace korovod::k8s_operator {

std::string_view PodGroupApiVersion(GangProvider provider) {
  return provider == GangProvider::kVolcano ? kVolcanoPodGroupApiVersion
                                            : kSchedulerPluginsPodGroupApiVersion;
}

nlohmann::json BuildPodGroup(const HorovodJob& job) {
  const GangSpec& gang = job.spec.scheduling_policy.gang;
  const GangProvider provider = gang.provider.value_or(GangProvider::kVolcano);
  nlohmann::json spec = {{"minMember", gang.min_available.value_or(job.spec.replicas)}};
  // Volcano orders PodGroups in its queue by priority; the pods' own priorityClassName does not
  // reach it.
  if (provider == GangProvider::kVolcano &&
      !job.spec.scheduling_policy.priority_class_name.empty()) {
    spec["priorityClassName"] = job.spec.scheduling_policy.priority_class_name;
  }
  return nlohmann::json{{"apiVersion", std::string(PodGroupApiVersion(provider))},
                        {"kind", std::string(kPodGroupKind)},
                        {"metadata", ChildMetadata(job, PodGroupName(job))},
                        {"spec", std::move(spec)}};
}

}  // namespace korovod::k8s_operator
