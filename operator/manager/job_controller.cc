#include "operator/manager/job_controller.h"

#include <openssl/rand.h>

#include <chrono>
#include <ctime>
#include <optional>
#include <vector>

#include "common/log.h"
#include "operator/api/json.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"
#include "operator/controller/json_access.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/observed_state.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/reasons.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/api_result.h"
#include "operator/manager/child_resource.h"
#include "operator/manager/status_writer.h"

namespace korovod::k8s_operator {
namespace {

std::string FreshKeyHex() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return "";  // the reconciler then waits
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string JobKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

// A node's Ready condition is True. Unknown (its kubelet stopped reporting) and False are not.
bool NodeReady(const nlohmann::json& node) {
  const nlohmann::json* conditions = FindPath(node, {"status", "conditions"});
  if (conditions == nullptr || !conditions->is_array()) return true;  // not reported yet
  for (const nlohmann::json& c : *conditions) {
    if (StringAt(c, {"type"}) == "Ready") return StringAt(c, {"status"}) == "True";
  }
  return true;
}

std::string UidOf(const nlohmann::json& object) {
  const nlohmann::json meta = object.value("metadata", nlohmann::json::object());
  return meta.is_object() ? meta.value("uid", "") : "";
}

// The job's key Secret, read by name: the operator may get and create Secrets but never list or
// watch them (a cluster-wide Secret watch would hand it every credential in the cluster). Empty
// when it is absent, is not this job's (a namesake's, see Observe), or the spec does not parse
// (the reconciler then reports the spec and creates nothing).
StatusOr<std::vector<nlohmann::json>> ReadJobKeySecret(const kube::ApiClient& client,
                                                       const nlohmann::json& job) {
  StatusOr<HorovodJob> parsed = HorovodJobFromJson(job);
  if (!parsed.ok()) return std::vector<nlohmann::json>{};
  const std::string ns = job.at("metadata").value("namespace", "");
  kube::ApiResult got = client.Get(kube::kSecrets.Path(ns, JobKeySecretName(*parsed)));
  if (kube::IsNotFound(got)) return std::vector<nlohmann::json>{};
  if (!got.ok()) return got.status().WithContext("job key Secret");
  std::vector<nlohmann::json> out;
  if (ControlledBy(got.value(), UidOf(job))) out.push_back(std::move(got).value());
  return out;
}

// The PodGroup API version a gang-scheduled job's spec names, or "" when it asks for none (or
// does not parse: the reconciler then reports the spec, not us).
std::string GangApiVersion(const nlohmann::json& job) {
  StatusOr<HorovodJob> parsed = HorovodJobFromJson(job);
  if (!parsed.ok()) return "";
  const GangSpec& gang = parsed->spec.scheduling_policy.gang;
  if (!gang.enabled || !gang.provider) return "";
  return std::string(PodGroupApiVersion(*gang.provider));
}

// Kueue's objects for a job in a LocalQueue (kueue_workload.h): its Workload, read by name (a
// namesake's is not its own), the ResourceFlavors the Workload's admission names, and, while
// the Workload is still to be created, the value of the job's priority class (v1beta2 wants it
// beside the reference). Without Kueue installed the Workload's create fails naming the API.
Status ObserveKueue(const kube::ApiClient& client, const nlohmann::json& job,
                    ObservedState& observed) {
  StatusOr<HorovodJob> parsed = HorovodJobFromJson(job);
  if (!parsed.ok() || QueueName(*parsed).empty()) return OkStatus();
  const std::string& ns = parsed->metadata.namespace_name;
  kube::ApiResult got = client.Get(kWorkloads.Path(ns, WorkloadName(*parsed)));
  if (got.ok()) {
    nlohmann::json workload = std::move(got).value();
    if (ControlledBy(workload, parsed->metadata.uid)) observed.workload = std::move(workload);
  } else if (!kube::IsNotFound(got)) {
    return got.status().WithContext("read Kueue Workload " + ns + "/" + WorkloadName(*parsed));
  }
  if (observed.workload) {
    const WorkloadState state = ObserveWorkload(*observed.workload, *parsed, observed.settings);
    for (const std::string& name : state.flavors) {
      kube::ApiResult flavor = client.Get(kResourceFlavors.Path("", name));
      if (flavor.ok()) {
        observed.resource_flavors.push_back(std::move(flavor).value());
      } else if (!kube::IsNotFound(flavor)) {
        return flavor.status().WithContext("read Kueue ResourceFlavor " + name);
      }
    }
    return OkStatus();
  }
  nlohmann::json priority = WorkloadPriorityClassOf(*parsed);
  if (!priority.is_object()) return OkStatus();
  const std::string name = priority.value("name", "");
  const bool kueue_class = priority.value("kind", "") == "WorkloadPriorityClass";
  kube::ApiResult pc =
      client.Get((kueue_class ? kWorkloadPriorityClasses : kPriorityClasses).Path("", name));
  if (!pc.ok()) {
    return pc.status().WithContext("read the " + priority.value("kind", "") + " " + name +
                                   " of the job's Kueue Workload");
  }
  priority["value"] = IntAt(pc.value(), {"value"}).value_or(0);
  observed.workload_priority = std::move(priority);
  return OkStatus();
}

}  // namespace

JobController::JobController(const kube::ApiClient& client, const kube::EventRecorder& events,
                             OperatorMetrics& metrics, JobControllerOptions options)
    : client_(client),
      metrics_(metrics),
      options_(std::move(options)),
      executor_(client, events, metrics, options_.may_write),
      elastic_([this](const std::string& key) { queue_.Add(key); },
               static_cast<uint16_t>(options_.elastic_port)) {
  kube::InformerOptions job_opts;
  job_opts.namespace_name = options_.namespace_name;
  job_opts.watch_timeout_seconds = options_.watch_timeout_seconds;
  kube::InformerHandlers job_handlers;
  job_handlers.on_add = [this](const nlohmann::json& j) { EnqueueJob(j); };
  job_handlers.on_update = [this](const nlohmann::json&, const nlohmann::json& j) {
    EnqueueJob(j);
  };
  job_handlers.on_delete = [this](const nlohmann::json& j) { EnqueueJob(j); };
  job_handlers.on_error = [](const Status& s) {
    KV_LOG(kWarning, kOperator, "watch horovodjobs: %s", s.ToString().c_str());
  };
  auto jobs = std::make_unique<kube::Informer>(client_, kHorovodJobs, job_opts, job_handlers);
  jobs_ = jobs.get();
  informers_.emplace_back("horovodjobs", std::move(jobs));

  kube::InformerOptions child_opts = job_opts;
  child_opts.label_selector = std::string(kLabelManagedBy) + "=" + std::string(kManagedByValue);
  kube::InformerHandlers child_handlers;
  child_handlers.on_add = [this](const nlohmann::json& c) { EnqueueOwner(c); };
  child_handlers.on_update = [this](const nlohmann::json&, const nlohmann::json& c) {
    EnqueueOwner(c);
  };
  child_handlers.on_delete = [this](const nlohmann::json& c) { EnqueueOwner(c); };
  for (auto [name, ref, slot] : {std::tuple{"pods", kube::kPods, &pods_},
                                 std::tuple{"services", kube::kServices, &services_},
                                 std::tuple{"configmaps", kube::kConfigMaps, &config_maps_}}) {
    child_handlers.on_error = [name = std::string(name)](const Status& s) {
      KV_LOG(kWarning, kOperator, "watch %s: %s", name.c_str(), s.ToString().c_str());
    };
    auto informer = std::make_unique<kube::Informer>(client_, ref, child_opts, child_handlers);
    *slot = informer.get();
    informers_.emplace_back(name, std::move(informer));
  }
  if (options_.settings.worker_network_policy.enabled()) {
    // Watched only when the operator creates them (and has the RBAC rule for it).
    child_handlers.on_error = [](const Status& s) {
      KV_LOG(kWarning, kOperator, "watch networkpolicies: %s", s.ToString().c_str());
    };
    auto informer = std::make_unique<kube::Informer>(client_, kube::kNetworkPolicies, child_opts,
                                                     child_handlers);
    network_policies_ = informer.get();
    informers_.emplace_back("networkpolicies", std::move(informer));
  }

  // Nodes are cluster-scoped: an operator confined to one namespace (a Role) cannot watch them.
  if (!options_.namespace_name.empty()) return;
  kube::InformerOptions node_opts;
  node_opts.watch_timeout_seconds = options_.watch_timeout_seconds;
  kube::InformerHandlers node_handlers;
  auto requeue_elastic = [this] {
    for (const std::string& key : elastic_.JobKeys()) queue_.Add(key);
  };
  node_handlers.on_add = [requeue_elastic](const nlohmann::json&) { requeue_elastic(); };
  node_handlers.on_update = [requeue_elastic](const nlohmann::json& before,
                                              const nlohmann::json& after) {
    if (NodeReady(before) != NodeReady(after)) requeue_elastic();
  };
  node_handlers.on_delete = [requeue_elastic](const nlohmann::json&) { requeue_elastic(); };
  node_handlers.on_error = [](const Status& s) {
    KV_LOG(kWarning, kOperator, "watch nodes (elastic jobs only): %s", s.ToString().c_str());
  };
  nodes_ = std::make_unique<kube::Informer>(client_, kube::kNodes, node_opts, node_handlers);
}

JobController::~JobController() { Stop(); }

void JobController::StartInformers() {
  for (auto& [name, informer] : informers_) informer->Start();
  if (nodes_) nodes_->Start();
}

bool JobController::Synced() const {
  for (const auto& [name, informer] : informers_) {
    if (!informer->HasSynced()) return false;
  }
  return true;
}

void JobController::StartWorkers() {
  if (stopped_.load() || !workers_.empty()) return;
  for (const nlohmann::json& job : jobs_->List()) EnqueueJob(job);
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
}

void JobController::Stop() {
  if (stopped_.exchange(true)) return;
  queue_.ShutDown();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  for (auto& [name, informer] : informers_) informer->Stop();
  if (nodes_) nodes_->Stop();
}

std::map<std::string, int> JobController::JobsByPhase() const {
  std::map<std::string, int> counts;
  for (const nlohmann::json& job : jobs_->List()) {
    std::string phase = "Pending";  // not reconciled yet
    if (auto it = job.find("status"); it != job.end() && it->is_object()) {
      phase = it->value("phase", phase);
    }
    ++counts[phase];
  }
  return counts;
}

void JobController::EnqueueJob(const nlohmann::json& job) {
  const nlohmann::json& meta = job.value("metadata", nlohmann::json::object());
  queue_.Add(JobKey(meta.value("namespace", ""), meta.value("name", "")));
}

void JobController::EnqueueOwner(const nlohmann::json& child) {
  const nlohmann::json meta = child.value("metadata", nlohmann::json::object());
  const nlohmann::json labels = meta.value("labels", nlohmann::json::object());
  const std::string job = labels.value(std::string(kLabelJobName), "");
  if (!job.empty()) queue_.Add(JobKey(meta.value("namespace", ""), job));
}

void JobController::Work() {
  while (true) {
    std::optional<std::string> key =
        queue_.Get(std::chrono::steady_clock::now() + std::chrono::hours(24));
    if (!key) {
      if (queue_.shutting_down()) return;
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    std::optional<int64_t> requeue;
    Status s = ReconcileKey(*key, &requeue);
    metrics_.reconciles->Increment();
    metrics_.reconcile_duration->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!s.ok()) {
      metrics_.reconcile_errors->Increment();
      KV_LOG(kWarning, kOperator, "reconcile %s failed (retry %d): %s", key->c_str(),
             queue_.NumRequeues(*key) + 1, s.ToString().c_str());
      queue_.AddRateLimited(*key);
    } else {
      queue_.Forget(*key);
      if (requeue) queue_.AddAfter(*key, std::chrono::seconds(std::max<int64_t>(*requeue, 0)));
    }
    queue_.Done(*key);
  }
}

ObservedState JobController::Observe(const nlohmann::json& job) const {
  const nlohmann::json& meta = job.at("metadata");
  const std::string ns = meta.value("namespace", "");
  const std::map<std::string, std::string> selector = {
      {std::string(kLabelJobName), meta.value("name", "")}};
  // The label finds candidates; the controller ownerReference decides. A namesake's children
  // (the job was deleted and recreated while they terminate, or they were orphaned) are left out
  // entirely: not counted in the status, not deleted (the garbage collector owns that).
  const std::string uid = UidOf(job);
  auto owned = [&uid](std::vector<nlohmann::json> children) {
    std::erase_if(children, [&uid](const nlohmann::json& c) { return !ControlledBy(c, uid); });
    return children;
  };
  ObservedState observed;
  observed.job = job;
  observed.pods = owned(pods_->List(ns, selector));
  observed.services = owned(services_->List(ns, selector));
  observed.config_maps = owned(config_maps_->List(ns, selector));
  if (network_policies_ != nullptr) {
    observed.network_policies = owned(network_policies_->List(ns, selector));
  }
  // observed.secrets: ReconcileKey reads the one key Secret by name (no Secret informer).
  observed.now_unix = static_cast<int64_t>(std::time(nullptr));
  observed.observed_ages = ages_.Observe(JobKey(ns, meta.value("name", "")), job, observed.pods);
  observed.settings = options_.settings;
  observed.elastic_server = elastic_.Observe(JobKey(ns, meta.value("name", "")), uid);
  // Only an elastic job reads the nodes: no copy of the node cache for every other reconcile.
  if (nodes_ != nullptr && Has(job, {"spec", "elastic"})) {
    for (const nlohmann::json& node : nodes_->List()) {
      if (!NodeReady(node)) observed.unready_nodes.insert(StringAt(node, {"metadata", "name"}));
    }
  }
  return observed;
}

Status JobController::ReconcileKey(const std::string& key,
                                   std::optional<int64_t>* requeue_after_seconds) {
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string name = key.substr(slash + 1);
  kube::ApiResult got = client_.Get(kHorovodJobs.Path(ns, name));
  if (kube::IsNotFound(got)) {  // deleted; the garbage collector has the rest
    elastic_.Forget(key);
    ages_.Forget(key);
    return OkStatus();
  }
  if (!got.ok()) return got.status();
  nlohmann::json job = std::move(got).value();

  ObservedState observed = Observe(job);
  KV_ASSIGN_OR_RETURN(observed.secrets, ReadJobKeySecret(client_, job));
  observed.fresh_key_hex = FreshKeyHex();
  if (const std::string api_version = GangApiVersion(job); !api_version.empty()) {
    KV_ASSIGN_OR_RETURN(kube::ResourceRef ref, ResourceOf(api_version, "PodGroup"));
    kube::ApiResult pg = client_.Get(ref.Path(ns, name));
    if (pg.ok()) {
      nlohmann::json group = std::move(pg).value();
      // A namesake's PodGroup is not ours (see Observe).
      if (ControlledBy(group, UidOf(job))) observed.pod_groups.push_back(std::move(group));
    } else if (!kube::IsNotFound(pg)) {
      return pg.status();
    }
  }

  KV_RETURN_IF_ERROR(ObserveKueue(client_, job, observed));

  ReconcileResult result = Reconcile(observed);
  Status first_error;
  for (const Action& action : result.actions) {
    Status s = executor_.Execute(job, action);
    if (!s.ok() && action.kind == Action::Kind::kCreate) {
      // As the Job controller's FailedCreate: the cause (a quota, Pod Security, a webhook's
      // denial) reaches the job's events, not only the operator's log.
      (void)executor_.Execute(
          job, Action{Action::Kind::kEvent, nlohmann::json(), std::string(kEventWarning),
                      std::string(kReasonFailedCreate), s.message()});
    }
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  // After the actions: a server started now serves pods created on a later reconcile (they need
  // its port), and a live set follows the pods this reconcile saw.
  if (Status s = elastic_.Apply(key, UidOf(job), result.elastic); !s.ok()) {
    if (first_error.ok()) first_error = s;
  }
  if (Status fenced = executor_.CheckMayWrite(); result.status && !fenced.ok()) {
    if (first_error.ok()) first_error = fenced.WithContext("status of " + key);
  } else if (result.status) {
    // Someone changed the job since we read it: recompute from the fresh object (the children,
    // and so the actions already taken, are unchanged).
    StatusWriteOutcome written =
        WriteJobStatus(client_, std::move(job), std::move(*result.status),
                       [&observed](const nlohmann::json& fresh) -> std::optional<nlohmann::json> {
                         // Recreated meanwhile: the children observed are not the new
                         // job's; its own reconcile (queued by its add) writes its status.
                         if (UidOf(fresh) != UidOf(observed.job)) return std::nullopt;
                         ObservedState again = observed;
                         again.job = fresh;
                         return Reconcile(again).status;
                       });
    metrics_.status_conflicts->Increment(written.conflicts);
    if (!written.status.ok() && first_error.ok()) first_error = written.status;
  }
  *requeue_after_seconds = result.requeue_after_seconds;
  return first_error;
}

}  // namespace korovod::k8s_operator
