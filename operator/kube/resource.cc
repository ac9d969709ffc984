#include "operator/kube/resource.h"

namespace korovod::kube {

std::string ResourceRef::Path(const std::string& ns, const std::string& name,
                              const std::string& subresource) const {
  std::string path = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) path += "/namespaces/" + ns;
  path += "/" + plural;
  if (!name.empty()) {
    path += "/" + name;
    if (!subresource.empty()) path += "/" + subresource;
  }
  return path;
}

}  // namespace korovod::kube
