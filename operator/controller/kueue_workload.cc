#include "operator/controller/kueue_workload.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "common/rfc3339.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/json_access.h"
#include "operator/controller/worker_pod_builder.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

const json* WorkloadCondition(const json& workload, std::string_view type) {
  const json* conditions = FindPath(workload, {"status", "conditions"});
  if (conditions == nullptr || !conditions->is_array()) return nullptr;
  for (const json& c : *conditions) {
    if (StringAt(c, {"type"}) == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const json& workload, std::string_view type) {
  const json* c = WorkloadCondition(workload, type);
  return c != nullptr && StringAt(*c, {"status"}) == "True";
}

// The worker pod as the Workload's PodSet template: the pod the operator creates, less what is
// per pod (its name, rank, epoch) so the template only changes when the spec does.
json WorkerTemplate(const HorovodJob& job, const OperatorSettings& settings) {
  json pod = BuildWorkerPod(job, 0, 0, settings);
  json metadata = json::object();
  if (pod["metadata"].contains("annotations")) {
    metadata["annotations"] = pod["metadata"]["annotations"];
  }
  return json{{"metadata", std::move(metadata)}, {"spec", std::move(pod["spec"])}};
}

}  // namespace

std::string QueueName(const HorovodJob& job) {
  const auto it = job.metadata.labels.find(std::string(kKueueQueueNameLabel));
  return it == job.metadata.labels.end() ? "" : it->second;
}

std::string WorkloadName(const HorovodJob& job) {
  std::string name = job.metadata.name;
  // "horovodjob-" (11) + name + "-" + 5: keep it a DNS label.
  if (name.size() > 63 - 17) name.resize(63 - 17);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return "horovodjob-" + name + "-" + job.metadata.uid.substr(0, 5);
}

json WorkloadPriorityClassOf(const HorovodJob& job) {
  const auto it = job.metadata.labels.find(std::string(kKueuePriorityClassLabel));
  if (it != job.metadata.labels.end() && !it->second.empty()) {
    return json{
        {"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", it->second}};
  }
  const std::string& name = job.spec.scheduling_policy.priority_class_name;
  if (name.empty()) return nullptr;
  return json{{"group", "scheduling.k8s.io"}, {"kind", "PriorityClass"}, {"name", name}};
}

json BuildWorkload(const HorovodJob& job, const json& priority, const OperatorSettings& settings) {
  json metadata = ChildMetadata(job, WorkloadName(job));
  metadata["labels"][std::string(kKueueJobUidLabel)] = job.metadata.uid;
  json spec = {{"queueName", QueueName(job)},
               {"podSets", json::array({{{"name", std::string(kWorkerPodSetName)},
                                         {"count", job.spec.replicas},
                                         {"template", WorkerTemplate(job, settings)}}})}};
  // v1beta2 requires the value beside the reference; the caller resolved it.
  const std::optional<int64_t> value =
      priority.is_object() ? IntAt(priority, {"value"}) : std::nullopt;
  if (value) {
    spec["priorityClassRef"] = {{"group", StringAt(priority, {"group"})},
                                {"kind", StringAt(priority, {"kind"})},
                                {"name", StringAt(priority, {"name"})}};
    spec["priority"] = *value;
  }
  return json{{"apiVersion", std::string(kWorkloadApiVersion)},
              {"kind", std::string(kWorkloadKind)},
              {"metadata", std::move(metadata)},
              {"spec", std::move(spec)}};
}

WorkloadState ObserveWorkload(const json& workload, const HorovodJob& job,
                              const OperatorSettings& settings) {
  WorkloadState s;
  const json* pod_sets = FindPath(workload, {"spec", "podSets"});
  const json* template_spec = pod_sets != nullptr && pod_sets->is_array() && pod_sets->size() == 1
                                  ? FindPath((*pod_sets)[0], {"template", "spec"})
                                  : nullptr;
  s.matches = StringAt(workload, {"spec", "queueName"}) == QueueName(job) &&
              template_spec != nullptr &&
              IntAt((*pod_sets)[0], {"count"}) == std::optional<int64_t>(job.spec.replicas) &&
              *template_spec == WorkerTemplate(job, settings)["spec"];
  const json* admission = FindPath(workload, {"status", "admission"});
  s.quota_reserved = admission != nullptr && admission->is_object();
  s.evicted = IsTrue(workload, "Evicted");
  s.admitted = s.quota_reserved && IsTrue(workload, "Admitted") && !s.evicted;
  s.finished = IsTrue(workload, "Finished");
  if (const json* c = WorkloadCondition(workload, "Evicted"); c != nullptr && s.evicted) {
    s.evicted_reason = StringAt(*c, {"reason"});
    s.evicted_message = StringAt(*c, {"message"});
  }
  std::set<std::string> flavors;
  const json* assignments =
      s.quota_reserved ? FindPath(*admission, {"podSetAssignments"}) : nullptr;
  if (assignments != nullptr && assignments->is_array()) {
    for (const json& a : *assignments) {
      if (StringAt(a, {"name"}) != kWorkerPodSetName) continue;
      const json* by_resource = FindPath(a, {"flavors"});
      if (by_resource == nullptr || !by_resource->is_object()) continue;
      for (const auto& [resource, flavor] : by_resource->items()) {
        if (flavor.is_string()) flavors.insert(flavor.get<std::string>());
      }
    }
  }
  s.flavors.assign(flavors.begin(), flavors.end());
  return s;
}

void ApplyFlavors(json& pod_template, const std::vector<json>& flavors) {
  if (!pod_template.contains("spec") || !pod_template["spec"].is_object()) {
    pod_template["spec"] = json::object();
  }
  json& spec = pod_template["spec"];
  for (const json& flavor : flavors) {
    const json* labels = FindPath(flavor, {"spec", "nodeLabels"});
    if (labels != nullptr && labels->is_object()) {
      if (!spec.contains("nodeSelector") || !spec["nodeSelector"].is_object()) {
        spec["nodeSelector"] = json::object();
      }
      for (const auto& [k, v] : labels->items()) {
        if (!spec["nodeSelector"].contains(k)) spec["nodeSelector"][k] = v;
      }
    }
    const json* tolerations = FindPath(flavor, {"spec", "tolerations"});
    if (tolerations != nullptr && tolerations->is_array()) {
      if (!spec.contains("tolerations") || !spec["tolerations"].is_array()) {
        spec["tolerations"] = json::array();
      }
      for (const json& t : *tolerations) {
        json& list = spec["tolerations"];
        if (std::find(list.begin(), list.end(), t) == list.end()) list.push_back(t);
      }
    }
  }
}

json WorkloadWithCondition(const json& workload, std::string_view type, bool value,
                           std::string_view reason, const std::string& message, int64_t now_unix,
                           bool clear_admission) {
  const std::string now =
      FormatRfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(now_unix)));
  json out = workload;
  if (!out.contains("status") || !out["status"].is_object()) out["status"] = json::object();
  json& status = out["status"];
  if (!status.contains("conditions") || !status["conditions"].is_array()) {
    status["conditions"] = json::array();
  }
  json& conditions = status["conditions"];
  const int64_t generation = IntAt(workload, {"metadata", "generation"}).value_or(0);
  auto set = [&](std::string_view t, bool v, std::string_view r, const std::string& m) {
    const std::string s = v ? "True" : "False";
    for (json& c : conditions) {
      if (!c.is_object() || StringAt(c, {"type"}) != t) continue;
      if (StringAt(c, {"status"}) != s) c["lastTransitionTime"] = now;
      c["status"] = s;
      c["reason"] = std::string(r);
      c["message"] = m;
      c["observedGeneration"] = generation;
      return;
    }
    conditions.push_back({{"type", std::string(t)},
                          {"status", s},
                          {"reason", std::string(r)},
                          {"message", m},
                          {"observedGeneration", generation},
                          {"lastTransitionTime", now}});
  };
  set(type, value, reason, message);
  if (clear_admission) {
    status.erase("admission");
    set("QuotaReserved", false, "Pending", message);
    if (IsTrue(workload, "Admitted")) {
      // As Kueue does: the time it ran so far counts toward its past execution time.
      const json* admitted = WorkloadCondition(workload, "Admitted");
      const auto since = ParseRfc3339(StringAt(*admitted, {"lastTransitionTime"}));
      if (since.ok()) {
        const int64_t ran =
            now_unix -
            std::chrono::floor<std::chrono::seconds>(since.value().time_since_epoch()).count();
        const int64_t before = IntAt(status, {"accumulatedPastExecutionTimeSeconds"}).value_or(0);
        status["accumulatedPastExecutionTimeSeconds"] = before + std::max<int64_t>(ran, 0);
      }
      set("Admitted", false, "NoReservation", "The workload has no reservation");
    }
  }
  return out;
}

}  // namespace korovod::k8s_operator
