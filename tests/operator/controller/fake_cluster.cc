#include "tests/operator/controller/fake_cluster.h"

#include <algorithm>
#include <chrono>

#include "common/rfc3339.h"

namespace korovod::k8s_operator::testing {

using nlohmann::json;

json MinimalJob(int replicas) {
  json job = json::parse(R"({
    "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid", "generation": 1},
    "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}},
             "sidecar": {"image": "s"}}})");
  job["spec"]["replicas"] = replicas;
  return job;
}

ObservedState FakeCluster::Observe(int64_t now) const {
  ObservedState o;
  o.job = job_;
  o.pods = pods_;
  o.services = services_;
  o.config_maps = config_maps_;
  o.secrets = secrets_;
  o.pod_groups = pod_groups_;
  o.network_policies = network_policies_;
  o.settings = settings_;
  if (!workloads_.empty()) o.workload = workloads_.front();
  o.resource_flavors = resource_flavors_;
  o.workload_priority = workload_priority_;
  o.now_unix = now;
  o.fresh_key_hex = kTestKeyHex;
  return o;
}

namespace {

std::string Rfc3339(int64_t unix_seconds) {
  return FormatRfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds)));
}

// As the API server does for a graceful delete: deletionTimestamp is when the grace ends.
void MarkDeleted(json& object, int64_t now, int64_t grace_seconds) {
  object["metadata"]["deletionTimestamp"] = Rfc3339(now + grace_seconds);
  object["metadata"]["deletionGracePeriodSeconds"] = grace_seconds;
}

}  // namespace

ReconcileResult FakeCluster::Step(int64_t now) {
  now_ = now;
  ReconcileResult r = Reconcile(Observe(now));
  Apply(r);
  return r;
}

std::vector<json>* FakeCluster::ListFor(const std::string& kind) {
  if (kind == "Pod") return &pods_;
  if (kind == "Service") return &services_;
  if (kind == "ConfigMap") return &config_maps_;
  if (kind == "Secret") return &secrets_;
  if (kind == "PodGroup") return &pod_groups_;
  if (kind == "Workload") return &workloads_;
  if (kind == "NetworkPolicy") return &network_policies_;
  return nullptr;
}

void FakeCluster::Apply(const ReconcileResult& result) {
  for (const Action& a : result.actions) {
    switch (a.kind) {
      case Action::Kind::kCreate: {
        std::vector<json>* list = ListFor(a.object.value("kind", ""));
        if (list == nullptr) break;
        json object = a.object;
        object["metadata"]["uid"] = "uid-" + std::to_string(next_uid_++);
        if (object["kind"] == "Pod") object["status"] = {{"phase", "Pending"}};
        // The API server's List drops apiVersion/kind from items; so does this one. (A
        // Workload is read with a GET, which keeps them.)
        if (object["kind"] != "Workload") {
          object.erase("apiVersion");
          object.erase("kind");
        }
        list->push_back(std::move(object));
        break;
      }
      case Action::Kind::kDelete: {
        std::vector<json>* list = ListFor(a.object.value("kind", ""));
        if (list == nullptr) break;
        const json& meta = a.object["metadata"];
        for (auto it = list->begin(); it != list->end(); ++it) {
          if ((*it)["metadata"]["name"] != meta["name"] ||
              (*it)["metadata"]["uid"] != meta["uid"]) {
            continue;
          }
          if (graceful_deletes_ && !a.force) {
            const json* grace = it->contains("spec") && (*it)["spec"].is_object() &&
                                        (*it)["spec"].contains("terminationGracePeriodSeconds")
                                    ? &(*it)["spec"]["terminationGracePeriodSeconds"]
                                    : nullptr;
            MarkDeleted(
                *it, now_,
                grace != nullptr && grace->is_number_integer() ? grace->get<int64_t>() : 30);
          } else {
            list->erase(it);
          }
          break;
        }
        break;
      }
      case Action::Kind::kEvent:
        events_.push_back(a);
        break;
      case Action::Kind::kDeleteJob:
        job_deleted_ = true;
        break;
      case Action::Kind::kReplaceStatus:
        for (json& w : workloads_) {
          if (w["metadata"]["name"] == a.object["metadata"]["name"]) w = a.object;
        }
        status_writes_.push_back(a);
        break;
    }
  }
  if (result.status) job_["status"] = *result.status;
}

void FakeCluster::Settle(int64_t now, int max_steps) {
  for (int i = 0; i < max_steps; ++i) {
    const ReconcileResult r = Step(now);
    const bool quiet = std::none_of(r.actions.begin(), r.actions.end(), [](const Action& a) {
      return a.kind == Action::Kind::kCreate || a.kind == Action::Kind::kDelete;
    });
    if (quiet) return;
    FinishTerminations();
  }
}

void FakeCluster::FinishTerminations() {
  for (std::vector<json>* list : {&pods_, &services_, &config_maps_, &secrets_, &pod_groups_,
                                  &workloads_, &network_policies_}) {
    std::erase_if(*list, [](const json& o) { return o["metadata"].contains("deletionTimestamp"); });
  }
}

json FakeCluster::status() const {
  return job_.contains("status") ? job_["status"] : json::object();
}

json* FakeCluster::Pod(const std::string& name) {
  for (json& p : pods_) {
    if (p["metadata"]["name"] == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> FakeCluster::PodNames() const {
  std::vector<std::string> names;
  for (const json& p : pods_) names.push_back(p["metadata"]["name"].get<std::string>());
  std::sort(names.begin(), names.end());
  return names;
}

void FakeCluster::SetPodPhase(const std::string& name, const std::string& phase) {
  if (json* p = Pod(name)) (*p)["status"]["phase"] = phase;
}

void FakeCluster::SetAllPodsPhase(const std::string& phase) {
  for (json& p : pods_) p["status"]["phase"] = phase;
}

void FakeCluster::SetPodReady(const std::string& name, bool ready) {
  if (json* p = Pod(name)) {
    (*p)["status"]["conditions"] =
        json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}});
  }
}

void FakeCluster::SetTrainerExit(const std::string& name, int exit_code,
                                 const std::string& reason) {
  json* p = Pod(name);
  if (p == nullptr) return;
  (*p)["status"]["containerStatuses"] =
      json::array({{{"name", "trainer"},
                    {"state", {{"terminated", {{"exitCode", exit_code}, {"reason", reason}}}}}}});
  (*p)["status"]["phase"] = exit_code == 0 ? "Succeeded" : "Failed";
}

void FakeCluster::SetDisruptionTarget(const std::string& name, const std::string& reason,
                                      const std::string& message) {
  json* p = Pod(name);
  if (p == nullptr) return;
  json& conditions = (*p)["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  conditions.push_back(
      {{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", reason}, {"message", message}});
}

void FakeCluster::SetContainerWaiting(const std::string& name, const std::string& container,
                                      const std::string& reason, const std::string& message,
                                      bool init) {
  json* p = Pod(name);
  if (p == nullptr) return;
  const json state = reason.empty() ? json{{"running", {{"startedAt", "2027-01-15T08:00:00Z"}}}}
                                    : json{{"waiting", {{"reason", reason}, {"message", message}}}};
  (*p)["status"][init ? "initContainerStatuses" : "containerStatuses"] =
      json::array({{{"name", container}, {"state", state}}});
}

void FakeCluster::SetUnschedulable(const std::string& name, const std::string& message) {
  json* p = Pod(name);
  if (p == nullptr) return;
  json& conditions = (*p)["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  conditions.push_back({{"type", "PodScheduled"},
                        {"status", "False"},
                        {"reason", "Unschedulable"},
                        {"message", message}});
}

void FakeCluster::MarkTerminating(const std::string& name, int64_t now, int64_t grace_seconds) {
  if (json* p = Pod(name)) MarkDeleted(*p, now, grace_seconds);
}

void FakeCluster::RemovePod(const std::string& name) {
  std::erase_if(pods_, [&](const json& p) { return p["metadata"]["name"] == name; });
}

const Action* FindEvent(const ReconcileResult& r, const std::string& reason) {
  for (const Action& a : r.actions) {
    if (a.kind == Action::Kind::kEvent && a.reason == reason) return &a;
  }
  return nullptr;
}

}  // namespace korovod::k8s_operator::testing
