#include "operator/manager/child_resource.h"

namespace korovod::k8s_operator {

StatusOr<kube::ResourceRef> ResourceOf(const std::string& api_version, const std::string& kind) {
  if (api_version == "v1") {
    if (kind == "Pod") return kube::kPods;
    if (kind == "Service") return kube::kServices;
    if (kind == "ConfigMap") return kube::kConfigMaps;
    if (kind == "Secret") return kube::kSecrets;
  }
  const size_t slash = api_version.find('/');
  if (slash != std::string::npos) {
    const std::string group = api_version.substr(0, slash);
    const std::string version = api_version.substr(slash + 1);
    if (kind == "PodGroup") return kube::ResourceRef{group, version, "podgroups", true};
    if (kind == "Workload" && group == "kueue.x-k8s.io") {
      return kube::ResourceRef{group, version, "workloads", true};
    }
    if (kind == "HorovodJob" && group == kHorovodJobs.group) return kHorovodJobs;
    if (kind == "NetworkPolicy" && api_version == kube::kNetworkPolicies.ApiVersion()) {
      return kube::kNetworkPolicies;
    }
  }
  return InvalidArgument("the operator does not write " + kind + " (" + api_version + ")");
}

StatusOr<std::string> ObjectPath(const nlohmann::json& object) {
  const std::string api_version = object.value("apiVersion", "");
  const std::string kind = object.value("kind", "");
  KV_ASSIGN_OR_RETURN(kube::ResourceRef ref, ResourceOf(api_version, kind));
  const nlohmann::json meta = object.value("metadata", nlohmann::json::object());
  return ref.Path(meta.value("namespace", ""), meta.value("name", ""));
}

std::string Describe(const nlohmann::json& object) {
  const nlohmann::json meta = object.value("metadata", nlohmann::json::object());
  return object.value("kind", "object") + " " + meta.value("namespace", "") + "/" +
         meta.value("name", "");
}

}  // namespace korovod::k8s_operator
