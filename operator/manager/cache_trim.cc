#include "operator/manager/cache_trim.h"

#include <string>

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

// Keeps the listed keys of an object; anything else goes.
void KeepOnly(json& object, std::initializer_list<const char*> keys) {
  if (!object.is_object()) return;
  json kept = json::object();
  for (const char* key : keys) {
    if (auto it = object.find(key); it != object.end()) kept[key] = std::move(*it);
  }
  object = std::move(kept);
}

}  // namespace

void TrimPod(json& pod) {
  if (!pod.is_object()) return;
  if (auto meta = pod.find("metadata"); meta != pod.end()) {
    KeepOnly(*meta, {"name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences",
                     "deletionTimestamp", "deletionGracePeriodSeconds", "creationTimestamp"});
  }
  if (auto spec = pod.find("spec"); spec != pod.end()) KeepOnly(*spec, {"nodeName"});
}

void TrimNode(json& node) {
  if (!node.is_object()) return;
  json ready = nullptr;
  if (auto status = node.find("status"); status != node.end() && status->is_object()) {
    if (auto conditions = status->find("conditions");
        conditions != status->end() && conditions->is_array()) {
      for (json& c : *conditions) {
        if (c.is_object() && c.value("type", "") == "Ready") {
          ready = {{"type", "Ready"}, {"status", c.value("status", "")}};
          break;
        }
      }
    }
  }
  KeepOnly(node, {"apiVersion", "kind", "metadata"});
  if (auto meta = node.find("metadata"); meta != node.end()) {
    KeepOnly(*meta, {"name", "resourceVersion", "uid"});
  }
  // No conditions at all (a node not reported yet) stays that way: NodeReady reads it as ready.
  if (!ready.is_null()) node["status"] = {{"conditions", json::array({std::move(ready)})}};
}

void TrimJob(json& job) {
  if (!job.is_object()) return;
  auto meta = job.find("metadata");
  if (meta == job.end() || !meta->is_object()) return;
  if (auto annotations = meta->find("annotations");
      annotations != meta->end() && annotations->is_object()) {
    annotations->erase("kubectl.kubernetes.io/last-applied-configuration");
    if (annotations->empty()) meta->erase(annotations);
  }
}

}  // namespace korovod::k8s_operator
