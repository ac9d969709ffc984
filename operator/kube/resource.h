// Where a kind of resource lives in the REST API: /api/v1/... for the core group,
// /apis/<group>/<version>/... otherwise.
#pragma once

#include <string>

namespace korovod::kube {

struct ResourceRef {
  std::string group;    // "" = core
  std::string version;  // "v1"
  std::string plural;   // "pods"
  bool namespaced = true;

  // /api/v1/namespaces/<ns>/pods[/<name>[/<subresource>]]. An empty `ns` (or a cluster-scoped
  // resource) gives the cluster-wide path: /api/v1/pods is every namespace's pods.
  std::string Path(const std::string& ns, const std::string& name = "",
                   const std::string& subresource = "") const;
  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
};

inline const ResourceRef kPods{"", "v1", "pods", true};
inline const ResourceRef kServices{"", "v1", "services", true};
inline const ResourceRef kConfigMaps{"", "v1", "configmaps", true};
inline const ResourceRef kSecrets{"", "v1", "secrets", true};
inline const ResourceRef kEvents{"", "v1", "events", true};
inline const ResourceRef kNamespaces{"", "v1", "namespaces", false};
inline const ResourceRef kNodes{"", "v1", "nodes", false};
inline const ResourceRef kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies", true};
inline const ResourceRef kLeases{"coordination.k8s.io", "v1", "leases", true};

}  // namespace korovod::kube
