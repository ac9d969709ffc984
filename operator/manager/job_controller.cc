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
#include "operator/controller/job_key_secret.h"
#include "operator/controller/json_access.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/observed_state.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/reasons.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/api_result.h"
#include "operator/manager/cache_trim.h"
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

// The PodGroup API version a gang-scheduled job's spec names, or "" when it asks for none (or
// does not parse: the reconciler then reports the spec, not us).
std::string GangApiVersion(const HorovodJob& parsed) {
  const GangSpec& gang = parsed.spec.scheduling_policy.gang;
  if (!gang.enabled || !gang.provider) return "";
  return std::string(PodGroupApiVersion(*gang.provider));
}

// "ns/job" of the job a child is labelled with; "" when it has no job label.
std::string OwnerKey(const nlohmann::json& child) {
  const std::string job = StringAt(child, {"metadata", "labels", std::string(kLabelJobName)});
  return job.empty() ? "" : JobKey(StringAt(child, {"metadata", "namespace"}), job);
}

bool IsPod(const nlohmann::json& object) {  // an event's action has no object (null)
  return StringAt(object, {"apiVersion"}) == "v1" && StringAt(object, {"kind"}) == "Pod";
}

// Whether the API server serves `group/version` `plural` (API discovery): a CRD that is not
// installed answers 404 here.
StatusOr<bool> ServesResource(const kube::ApiClient& client, const kube::ResourceRef& ref) {
  kube::ApiResult got = client.Get("/apis/" + ref.group + "/" + ref.version);
  if (kube::IsNotFound(got)) return false;
  if (!got.ok()) return got.status();
  const nlohmann::json* resources = FindPath(got.value(), {"resources"});
  if (resources == nullptr || !resources->is_array()) return false;
  for (const nlohmann::json& r : *resources) {
    if (StringAt(r, {"name"}) == ref.plural) return true;
  }
  return false;
}

}  // namespace

JobController::JobController(const kube::ApiClient& client, const kube::EventRecorder& events,
                             OperatorMetrics& metrics, JobControllerOptions options)
    : client_(client),
      metrics_(metrics),
      options_(std::move(options)),
      executor_(client, events, metrics, options_.may_write),
      expectations_(options_.expectations_timeout),
      elastic_([this](const std::string& key) { queue_.Add(key); },
               static_cast<uint16_t>(options_.elastic_port)) {
  kube::InformerOptions job_opts;
  job_opts.namespace_name = options_.namespace_name;
  job_opts.watch_timeout_seconds = options_.watch_timeout_seconds;
  job_opts.transform = TrimJob;
  kube::InformerHandlers job_handlers;
  job_handlers.on_add = [this](const nlohmann::json& j) { OnJobEvent(j, false); };
  job_handlers.on_update = [this](const nlohmann::json&, const nlohmann::json& j) {
    OnJobEvent(j, false);
  };
  job_handlers.on_delete = [this](const nlohmann::json& j) { OnJobEvent(j, true); };
  job_handlers.on_error = [](const Status& s) {
    KV_LOG(kWarning, kOperator, "watch horovodjobs: %s", s.ToString().c_str());
  };
  auto jobs = std::make_unique<kube::Informer>(client_, kHorovodJobs, job_opts, job_handlers);
  jobs_ = jobs.get();
  informers_.emplace_back("horovodjobs", std::move(jobs));

  for (auto [name, ref, slot] : {std::tuple{"pods", kube::kPods, &pods_},
                                 std::tuple{"services", kube::kServices, &services_},
                                 std::tuple{"configmaps", kube::kConfigMaps, &config_maps_}}) {
    kube::InformerOptions child_opts = job_opts;
    child_opts.label_selector = std::string(kLabelManagedBy) + "=" + std::string(kManagedByValue);
    child_opts.transform = nullptr;
    kube::InformerHandlers child_handlers;
    const bool pods = slot == &pods_;
    if (pods) child_opts.transform = TrimPod;
    // Pod events also settle the expectations of the job's own creates and deletes.
    child_handlers.on_add = [this, pods](const nlohmann::json& c) {
      if (pods) expectations_.Observed(OwnerKey(c), c, false);
      EnqueueOwner(c);
    };
    child_handlers.on_update = [this, pods](const nlohmann::json&, const nlohmann::json& c) {
      if (pods) expectations_.Observed(OwnerKey(c), c, false);
      EnqueueOwner(c);
    };
    child_handlers.on_delete = [this, pods](const nlohmann::json& c) {
      if (pods) expectations_.Observed(OwnerKey(c), c, true);
      EnqueueOwner(c);
    };
    child_handlers.on_error = [name = std::string(name)](const Status& s) {
      KV_LOG(kWarning, kOperator, "watch %s: %s", name.c_str(), s.ToString().c_str());
    };
    auto informer = std::make_unique<kube::Informer>(client_, ref, child_opts, child_handlers);
    *slot = informer.get();
    informers_.emplace_back(name, std::move(informer));
  }
  if (options_.settings.worker_network_policy.enabled()) {
    // Watched only when the operator creates them (and has the RBAC rule for it).
    kube::InformerOptions policy_opts = job_opts;
    policy_opts.label_selector = std::string(kLabelManagedBy) + "=" + std::string(kManagedByValue);
    policy_opts.transform = nullptr;
    kube::InformerHandlers policy_handlers;
    policy_handlers.on_add = [this](const nlohmann::json& c) { EnqueueOwner(c); };
    policy_handlers.on_update = [this](const nlohmann::json&, const nlohmann::json& c) {
      EnqueueOwner(c);
    };
    policy_handlers.on_delete = [this](const nlohmann::json& c) { EnqueueOwner(c); };
    policy_handlers.on_error = [](const Status& s) {
      KV_LOG(kWarning, kOperator, "watch networkpolicies: %s", s.ToString().c_str());
    };
    auto informer = std::make_unique<kube::Informer>(client_, kube::kNetworkPolicies, policy_opts,
                                                     policy_handlers);
    network_policies_ = informer.get();
    informers_.emplace_back("networkpolicies", std::move(informer));
  }
}

JobController::~JobController() { Stop(); }

kube::Informer* JobController::StartChildInformer(const kube::ResourceRef& ref,
                                                  const std::string& fallback) {
  StatusOr<bool> served = ServesResource(client_, ref);
  if (!served.ok() || !*served) {
    KV_LOG(kInfo, kOperator, "%s %s are not served (%s): %s", ref.ApiVersion().c_str(),
           ref.plural.c_str(),
           served.ok() ? "its CRD is not installed" : served.status().ToString().c_str(),
           fallback.c_str());
    return nullptr;
  }
  kube::InformerOptions opts;
  opts.namespace_name = options_.namespace_name;
  opts.watch_timeout_seconds = options_.watch_timeout_seconds;
  opts.label_selector = std::string(kLabelManagedBy) + "=" + std::string(kManagedByValue);
  kube::InformerHandlers handlers;
  handlers.on_add = [this](const nlohmann::json& w) { EnqueueOwner(w); };
  handlers.on_update = [this](const nlohmann::json&, const nlohmann::json& w) { EnqueueOwner(w); };
  handlers.on_delete = [this](const nlohmann::json& w) { EnqueueOwner(w); };
  handlers.on_error = [what = ref.ApiVersion() + " " + ref.plural](const Status& s) {
    KV_LOG(kWarning, kOperator, "watch %s: %s", what.c_str(), s.ToString().c_str());
  };
  auto informer = std::make_unique<kube::Informer>(client_, ref, opts, handlers);
  kube::Informer* raw = informer.get();
  informers_.emplace_back(ref.plural, std::move(informer));
  KV_LOG(kInfo, kOperator, "watching %s %s", ref.ApiVersion().c_str(), ref.plural.c_str());
  return raw;
}

void JobController::StartInformers() {
  if (!crds_checked_) {
    // Kueue and the gang schedulers are optional: their objects are watched where their CRDs
    // are served when the operator starts, else read by name (and Workloads polled).
    crds_checked_ = true;
    workloads_ = StartChildInformer(
        kWorkloads, "jobs in a LocalQueue read their Workload by name at each reconcile, every " +
                        std::to_string(kKueueWaitPollSeconds) + " s while queued and " +
                        std::to_string(kKueueRunPollSeconds) + " s while running");
    for (GangProvider provider : {GangProvider::kVolcano, GangProvider::kSchedulerPlugins}) {
      const std::string api_version(PodGroupApiVersion(provider));
      StatusOr<kube::ResourceRef> ref = ResourceOf(api_version, "PodGroup");
      if (!ref.ok()) continue;
      kube::Informer* informer = StartChildInformer(
          *ref, "gang jobs of that scheduler read their PodGroup by name at each reconcile");
      if (informer != nullptr) pod_groups_[api_version] = informer;
    }
  }
  for (auto& [name, informer] : informers_) informer->Start();
}

bool JobController::Synced() const {
  for (const auto& [name, informer] : informers_) {
    if (!informer->HasSynced()) return false;
  }
  return true;
}

bool JobController::WatchingNodes() const {
  std::lock_guard<std::mutex> lock(nodes_mu_);
  return nodes_ != nullptr;
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
  std::shared_ptr<kube::Informer> nodes;
  {
    std::lock_guard<std::mutex> lock(nodes_mu_);
    nodes = std::move(nodes_);
  }
  if (nodes) nodes->Stop();
}

std::map<std::string, int> JobController::JobsByPhase() const {
  std::map<std::string, int> counts;
  jobs_->ForEach([&counts](const nlohmann::json& job) {
    std::string phase = "Pending";  // not reconciled yet
    if (auto it = job.find("status"); it != job.end() && it->is_object()) {
      phase = it->value("phase", phase);
    }
    ++counts[phase];
  });
  return counts;
}

void JobController::OnJobEvent(const nlohmann::json& job, bool deleted) {
  if (deleted) {
    std::lock_guard<std::mutex> lock(secrets_mu_);
    key_secrets_.erase(UidOf(job));
  }
  TrackElastic(
      JobKey(StringAt(job, {"metadata", "namespace"}), StringAt(job, {"metadata", "name"})),
      !deleted && Has(job, {"spec", "elastic"}));
  EnqueueJob(job);
}

void JobController::TrackElastic(const std::string& key, bool elastic) {
  // Nodes are cluster-scoped: an operator confined to one namespace (a Role) cannot watch them.
  if (!options_.namespace_name.empty() || stopped_.load()) return;
  std::shared_ptr<kube::Informer> stop;
  {
    std::lock_guard<std::mutex> lock(nodes_mu_);
    const bool changed = elastic ? elastic_jobs_.insert(key).second : elastic_jobs_.erase(key) > 0;
    if (!changed) return;
    if (!elastic_jobs_.empty() && !nodes_) {
      kube::InformerOptions opts;
      opts.watch_timeout_seconds = options_.watch_timeout_seconds;
      opts.transform = TrimNode;
      // A Node is 10+ KB of which TrimNode keeps ~100 bytes: small pages hold less at once.
      opts.page_size = 100;
      kube::InformerHandlers handlers;
      auto requeue_elastic = [this] {
        for (const std::string& k : elastic_.JobKeys()) queue_.Add(k);
      };
      handlers.on_add = [requeue_elastic](const nlohmann::json&) { requeue_elastic(); };
      handlers.on_update = [requeue_elastic](const nlohmann::json& before,
                                             const nlohmann::json& after) {
        if (NodeReady(before) != NodeReady(after)) requeue_elastic();
      };
      handlers.on_delete = [requeue_elastic](const nlohmann::json&) { requeue_elastic(); };
      handlers.on_error = [](const Status& s) {
        KV_LOG(kWarning, kOperator, "watch nodes (elastic jobs only): %s", s.ToString().c_str());
      };
      nodes_ = std::make_shared<kube::Informer>(client_, kube::kNodes, opts, handlers);
      nodes_->Start();
      KV_LOG(kInfo, kOperator, "elastic job %s: watching nodes (their names and readiness)",
             key.c_str());
    } else if (elastic_jobs_.empty() && nodes_) {
      stop = std::move(nodes_);
      KV_LOG(kInfo, kOperator, "no elastic job left (the last was %s): stopped watching nodes",
             key.c_str());
    }
  }
  if (stop) stop->Stop();  // outside the lock: its handlers may be running
}

void JobController::EnqueueJob(const nlohmann::json& job) {
  const nlohmann::json& meta = job.value("metadata", nlohmann::json::object());
  queue_.Add(JobKey(meta.value("namespace", ""), meta.value("name", "")));
}

void JobController::EnqueueOwner(const nlohmann::json& child) {
  const std::string key = OwnerKey(child);
  if (!key.empty()) queue_.Add(key);
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
  // Only an elastic job reads the nodes, in place (no copy of the node cache).
  if (Has(job, {"spec", "elastic"})) {
    std::shared_ptr<kube::Informer> nodes;
    {
      std::lock_guard<std::mutex> lock(nodes_mu_);
      nodes = nodes_;
    }
    if (nodes) {
      nodes->ForEach([&observed](const nlohmann::json& node) {
        if (!NodeReady(node)) observed.unready_nodes.insert(StringAt(node, {"metadata", "name"}));
      });
    }
  }
  return observed;
}

// The job's key Secret, read by name: the operator may get and create Secrets but never list or
// watch them (a cluster-wide Secret watch would hand it every credential in the cluster). It is
// immutable, so once read it is kept by job uid and never read again; while absent (the
// reconcile then creates it) each reconcile reads it once more. Empty when it is absent or is
// not this job's (a namesake's, see Observe).
StatusOr<std::vector<nlohmann::json>> JobController::KeySecret(const nlohmann::json& job,
                                                               const HorovodJob& parsed) {
  const std::string uid = UidOf(job);
  {
    std::lock_guard<std::mutex> lock(secrets_mu_);
    if (auto it = key_secrets_.find(uid); it != key_secrets_.end()) return {{it->second}};
  }
  const std::string ns = parsed.metadata.namespace_name;
  kube::ApiResult got = client_.Get(kube::kSecrets.Path(ns, JobKeySecretName(parsed)));
  if (kube::IsNotFound(got)) return std::vector<nlohmann::json>{};
  if (!got.ok()) return got.status().WithContext("job key Secret");
  if (!ControlledBy(got.value(), uid)) return std::vector<nlohmann::json>{};
  std::lock_guard<std::mutex> lock(secrets_mu_);
  key_secrets_[uid] = got.value();
  return {{std::move(got).value()}};
}

// A gang-scheduled job's PodGroup: from the informer of its API version where that is served,
// else read by name. A namesake's is not the job's (see Observe).
Status JobController::ObservePodGroup(const HorovodJob& parsed, ObservedState& observed) const {
  const std::string api_version = GangApiVersion(parsed);
  if (api_version.empty()) return OkStatus();
  const std::string& ns = parsed.metadata.namespace_name;
  const std::string name = PodGroupName(parsed);
  std::optional<nlohmann::json> group;
  if (auto it = pod_groups_.find(api_version); it != pod_groups_.end()) {
    group = it->second->Get(ns, name);
  } else {
    KV_ASSIGN_OR_RETURN(kube::ResourceRef ref, ResourceOf(api_version, "PodGroup"));
    kube::ApiResult got = client_.Get(ref.Path(ns, name));
    if (got.ok()) {
      group = std::move(got).value();
    } else if (!kube::IsNotFound(got)) {
      return got.status().WithContext("read PodGroup " + ns + "/" + name);
    }
  }
  if (group && ControlledBy(*group, parsed.metadata.uid)) {
    observed.pod_groups.push_back(std::move(*group));
  }
  return OkStatus();
}

// Kueue's objects for a job in a LocalQueue (kueue_workload.h): its Workload (from the informer
// where Kueue is served, else read by name; a namesake's is not its own), the ResourceFlavors
// the Workload's admission names, and, while the Workload is still to be created, the value of
// the job's priority class (v1beta2 wants it beside the reference). Without Kueue installed the
// Workload's create fails naming the API.
Status JobController::ObserveKueue(const HorovodJob& parsed, ObservedState& observed) const {
  if (QueueName(parsed).empty()) return OkStatus();
  const std::string& ns = parsed.metadata.namespace_name;
  std::optional<nlohmann::json> workload;
  if (workloads_ != nullptr) {
    observed.workload_watched = true;
    workload = workloads_->Get(ns, WorkloadName(parsed));
  } else {
    kube::ApiResult got = client_.Get(kWorkloads.Path(ns, WorkloadName(parsed)));
    if (got.ok()) {
      workload = std::move(got).value();
    } else if (!kube::IsNotFound(got)) {
      return got.status().WithContext("read Kueue Workload " + ns + "/" + WorkloadName(parsed));
    }
  }
  if (workload && ControlledBy(*workload, parsed.metadata.uid)) {
    observed.workload = std::move(workload);
  }
  if (observed.workload) {
    const WorkloadState state = ObserveWorkload(*observed.workload, parsed, observed.settings);
    for (const std::string& name : state.flavors) {
      kube::ApiResult flavor = client_.Get(kResourceFlavors.Path("", name));
      if (flavor.ok()) {
        observed.resource_flavors.push_back(std::move(flavor).value());
      } else if (!kube::IsNotFound(flavor)) {
        return flavor.status().WithContext("read Kueue ResourceFlavor " + name);
      }
    }
    return OkStatus();
  }
  nlohmann::json priority = WorkloadPriorityClassOf(parsed);
  if (!priority.is_object()) return OkStatus();
  const std::string name = priority.value("name", "");
  const bool kueue_class = priority.value("kind", "") == "WorkloadPriorityClass";
  kube::ApiResult pc =
      client_.Get((kueue_class ? kWorkloadPriorityClasses : kPriorityClasses).Path("", name));
  if (!pc.ok()) {
    return pc.status().WithContext("read the " + priority.value("kind", "") + " " + name +
                                   " of the job's Kueue Workload");
  }
  priority["value"] = IntAt(pc.value(), {"value"}).value_or(0);
  observed.workload_priority = std::move(priority);
  return OkStatus();
}

Status JobController::ExecuteActions(const std::string& key, const nlohmann::json& job,
                                     bool elastic, const std::vector<Action>& actions) {
  return executor_.ExecuteAll(job, actions, [&](const Action& action) {
    // An elastic job's pods: until the cache has seen this, the job's pod set is not acted on.
    if (!elastic || !IsPod(action.object)) return;
    if (action.kind == Action::Kind::kCreate) {
      expectations_.ExpectCreate(key, StringAt(action.object, {"metadata", "name"}));
    } else if (action.kind == Action::Kind::kDelete) {
      expectations_.ExpectDelete(key, StringAt(action.object, {"metadata", "uid"}));
    }
  });
}

Status JobController::ReconcileKey(const std::string& key,
                                   std::optional<int64_t>* requeue_after_seconds) {
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string name = key.substr(slash + 1);
  // The informer's copy: if it is older than the stored job, the status write meets a 409 and
  // recomputes from a fresh read (status_writer.h); its update event queues the job again.
  std::optional<nlohmann::json> cached = jobs_->Get(ns, name);
  if (!cached) {  // deleted; the garbage collector has the rest
    elastic_.Forget(key);
    expectations_.Forget(key);
    ages_.Forget(key);
    return OkStatus();
  }
  nlohmann::json job = std::move(*cached);
  ObservedState observed = Observe(job);
  const bool elastic = Has(job, {"spec", "elastic"});
  if (elastic) {
    PodExpectations::Check check = expectations_.Satisfied(key, observed.pods);
    if (!check.satisfied) {
      // The pod events that settle them queue the job; the deadline is a backstop.
      KV_LOG(kInfo, kOperator, "job %s: waiting for the pod cache to see %s", key.c_str(),
             check.pending.c_str());
      *requeue_after_seconds = std::chrono::ceil<std::chrono::seconds>(check.time_left).count();
      return OkStatus();
    }
  }
  StatusOr<HorovodJob> parsed = HorovodJobFromJson(job);  // once, for the reads below
  if (parsed.ok()) {
    KV_ASSIGN_OR_RETURN(observed.secrets, KeySecret(job, *parsed));
    KV_RETURN_IF_ERROR(ObservePodGroup(*parsed, observed));
    KV_RETURN_IF_ERROR(ObserveKueue(*parsed, observed));
  }  // else the reconciler reports the spec and creates nothing
  observed.fresh_key_hex = FreshKeyHex();

  ReconcileResult result = Reconcile(observed);
  Status first_error = ExecuteActions(key, job, elastic, result.actions);
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
