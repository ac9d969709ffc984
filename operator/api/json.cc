#include "operator/api/json.h"

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "operator/api/rank_ranges.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

Status Bad(const std::string& path, const std::string& what) {
  return InvalidArgument(path + ": " + what);
}

// A JSON object being read at `path`. Absent and null fields are both "unset".
class ObjectReader {
 public:
  static StatusOr<ObjectReader> Open(const json& value, std::string path) {
    if (!value.is_object()) {
      return Bad(path, std::string("must be an object, got ") + value.type_name());
    }
    return ObjectReader(value, std::move(path));
  }

  const std::string& path() const { return path_; }
  const json* Find(std::string_view key) const {
    auto it = value_->find(key);
    if (it == value_->end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string PathOf(std::string_view key) const { return Join(path_, key); }

  // Rejects fields the schema does not declare (the API server would have pruned them; a typo
  // in a hand-written object should not be silently ignored).
  Status OnlyKnown(std::initializer_list<std::string_view> known) const {
    for (auto it = value_->begin(); it != value_->end(); ++it) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || it.key() == k;
      if (!ok) return Bad(PathOf(it.key()), "unknown field");
    }
    return OkStatus();
  }

  Status Int(std::string_view key, int64_t& out, std::optional<int64_t> min = std::nullopt) const {
    std::optional<int64_t> v;
    KV_RETURN_IF_ERROR(OptInt(key, v, min));
    if (v) out = *v;
    return OkStatus();
  }
  Status OptInt(std::string_view key, std::optional<int64_t>& out,
                std::optional<int64_t> min = std::nullopt) const {
    const json* v = Find(key);
    if (v == nullptr) return OkStatus();
    if (!v->is_number_integer()) {
      return Bad(PathOf(key), std::string("must be an integer, got ") + TypeOf(*v));
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
      return Bad(PathOf(key), "out of range");
    }
    const int64_t x = v->get<int64_t>();
    if (min && x < *min) return Bad(PathOf(key), "must be >= " + std::to_string(*min));
    out = x;
    return OkStatus();
  }
  Status OptPositiveNumber(std::string_view key, std::optional<double>& out) const {
    const json* v = Find(key);
    if (v == nullptr) return OkStatus();
    if (!v->is_number())
      return Bad(PathOf(key), std::string("must be a number, got ") + TypeOf(*v));
    const double x = v->get<double>();
    if (!(x > 0)) return Bad(PathOf(key), "must be > 0");
    out = x;
    return OkStatus();
  }
  Status Bool(std::string_view key, bool& out) const {
    const json* v = Find(key);
    if (v == nullptr) return OkStatus();
    if (!v->is_boolean())
      return Bad(PathOf(key), std::string("must be a boolean, got ") + TypeOf(*v));
    out = v->get<bool>();
    return OkStatus();
  }
  Status String(std::string_view key, std::string& out) const {
    const json* v = Find(key);
    if (v == nullptr) return OkStatus();
    if (!v->is_string())
      return Bad(PathOf(key), std::string("must be a string, got ") + TypeOf(*v));
    out = v->get<std::string>();
    return OkStatus();
  }
  template <typename E, size_t N>
  Status Enum(std::string_view key, const std::array<std::string_view, N>& names,
              std::optional<E>& out) const {
    std::string s;
    if (Find(key) == nullptr) return OkStatus();
    KV_RETURN_IF_ERROR(String(key, s));
    for (size_t i = 0; i < N; ++i) {
      if (names[i] == s) {
        out = static_cast<E>(i);
        return OkStatus();
      }
    }
    std::string allowed;
    for (size_t i = 0; i < N; ++i) allowed += (i ? ", " : "") + std::string(names[i]);
    return Bad(PathOf(key), "must be one of " + allowed + ", got \"" + s + "\"");
  }
  StatusOr<std::optional<ObjectReader>> Child(std::string_view key) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<ObjectReader>();
    KV_ASSIGN_OR_RETURN(ObjectReader r, Open(*v, PathOf(key)));
    return std::optional<ObjectReader>(std::move(r));
  }

 private:
  ObjectReader(const json& value, std::string path) : value_(&value), path_(std::move(path)) {}
  static const char* TypeOf(const json& v) {
    return v.is_number_float() ? "number" : v.type_name();
  }

  const json* value_;
  std::string path_;
};

Status ParseTemplate(const json& value, const std::string& path, json& out) {
  KV_ASSIGN_OR_RETURN(ObjectReader t, ObjectReader::Open(value, path));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> pod_spec, t.Child("spec"));
  if (!pod_spec) return Bad(t.PathOf("spec"), "required");
  const json* containers = pod_spec->Find("containers");
  const std::string cpath = pod_spec->PathOf("containers");
  if (containers == nullptr) return Bad(cpath, "required");
  if (!containers->is_array()) {
    return Bad(cpath, std::string("must be an array, got ") + containers->type_name());
  }
  if (containers->empty()) return Bad(cpath, "must have at least 1 item");
  for (size_t i = 0; i < containers->size(); ++i) {
    const std::string ipath = cpath + "[" + std::to_string(i) + "]";
    KV_ASSIGN_OR_RETURN(ObjectReader c, ObjectReader::Open((*containers)[i], ipath));
    std::string name;
    KV_RETURN_IF_ERROR(c.String("name", name));
    if (name.empty()) return Bad(c.PathOf("name"), "required");
  }
  out = value;
  return OkStatus();
}

Status ParseWorker(const ObjectReader& r, WorkerSpec& out) {
  KV_RETURN_IF_ERROR(r.OnlyKnown({"gpus", "ranksPerWorker", "rdma"}));
  KV_RETURN_IF_ERROR(r.Int("gpus", out.gpus, 0));
  KV_RETURN_IF_ERROR(r.Int("ranksPerWorker", out.ranks_per_worker, 1));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> rdma, r.Child("rdma"));
  if (rdma) {
    KV_RETURN_IF_ERROR(rdma->OnlyKnown({"resourceName", "count"}));
    KV_RETURN_IF_ERROR(rdma->String("resourceName", out.rdma.resource_name));
    KV_RETURN_IF_ERROR(rdma->Int("count", out.rdma.count, 0));
  }
  return OkStatus();
}

Status ParseSidecar(const ObjectReader& r, SidecarSpec& out) {
  KV_RETURN_IF_ERROR(r.OnlyKnown({"image", "resources", "engine", "env"}));
  if (r.Find("image") == nullptr) return Bad(r.PathOf("image"), "required");
  KV_RETURN_IF_ERROR(r.String("image", out.image));
  if (out.image.empty()) return Bad(r.PathOf("image"), "must not be empty");
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> resources, r.Child("resources"));
  if (resources) out.resources = *r.Find("resources");
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> engine, r.Child("engine"));
  if (engine) {
    KV_RETURN_IF_ERROR(engine->OnlyKnown({"fusionThresholdBytes", "cycleTimeMs", "timeline"}));
    KV_RETURN_IF_ERROR(
        engine->OptInt("fusionThresholdBytes", out.engine.fusion_threshold_bytes, 0));
    KV_RETURN_IF_ERROR(engine->OptPositiveNumber("cycleTimeMs", out.engine.cycle_time_ms));
    KV_RETURN_IF_ERROR(engine->String("timeline", out.engine.timeline));
  }
  if (const json* env = r.Find("env")) {
    if (!env->is_array()) {
      return Bad(r.PathOf("env"), std::string("must be a list, got ") + env->type_name());
    }
    for (size_t i = 0; i < env->size(); ++i) {
      KV_ASSIGN_OR_RETURN(
          ObjectReader item,
          ObjectReader::Open((*env)[i], r.PathOf("env") + "[" + std::to_string(i) + "]"));
      KV_RETURN_IF_ERROR(item.OnlyKnown({"name", "value"}));
      EnvEntry e;
      if (item.Find("name") == nullptr) return Bad(item.PathOf("name"), "required");
      KV_RETURN_IF_ERROR(item.String("name", e.name));
      KV_RETURN_IF_ERROR(item.String("value", e.value));
      out.env.push_back(std::move(e));
    }
  }
  return OkStatus();
}

Status ParseNetworking(const ObjectReader& r, NetworkingSpec& out) {
  KV_RETURN_IF_ERROR(r.OnlyKnown({"hostNetwork", "interface"}));
  KV_RETURN_IF_ERROR(r.Bool("hostNetwork", out.host_network));
  return r.String("interface", out.interface_name);
}

Status ParseRunPolicy(const ObjectReader& r, RunPolicy& out) {
  KV_RETURN_IF_ERROR(
      r.OnlyKnown({"cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds",
                   "ttlSecondsAfterFinished", "suspend", "startupTimeoutSeconds", "managedBy"}));
  std::optional<CleanPodPolicy> policy;
  KV_RETURN_IF_ERROR(r.Enum("cleanPodPolicy", kCleanPodPolicyNames, policy));
  if (policy) out.clean_pod_policy = *policy;
  KV_RETURN_IF_ERROR(r.Int("backoffLimit", out.backoff_limit, 0));
  KV_RETURN_IF_ERROR(
      r.OptInt("activeDeadlineSeconds", out.active_deadline_seconds, kMinActiveDeadlineSeconds));
  KV_RETURN_IF_ERROR(r.OptInt("ttlSecondsAfterFinished", out.ttl_seconds_after_finished, 0));
  KV_RETURN_IF_ERROR(
      r.Int("startupTimeoutSeconds", out.startup_timeout_seconds, kMinStartupTimeoutSeconds));
  if (out.startup_timeout_seconds > kMaxStartupTimeoutSeconds) {
    return Bad(r.PathOf("startupTimeoutSeconds"),
               "must be <= " + std::to_string(kMaxStartupTimeoutSeconds));
  }
  KV_RETURN_IF_ERROR(r.String("managedBy", out.managed_by));
  return r.Bool("suspend", out.suspend);
}

Status ParseSchedulingPolicy(const ObjectReader& r, SchedulingPolicy& out) {
  KV_RETURN_IF_ERROR(r.OnlyKnown({"schedulerName", "priorityClassName", "gang"}));
  KV_RETURN_IF_ERROR(r.String("schedulerName", out.scheduler_name));
  KV_RETURN_IF_ERROR(r.String("priorityClassName", out.priority_class_name));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> gang, r.Child("gang"));
  if (gang) {
    KV_RETURN_IF_ERROR(gang->OnlyKnown({"enabled", "provider", "minAvailable"}));
    KV_RETURN_IF_ERROR(gang->Bool("enabled", out.gang.enabled));
    KV_RETURN_IF_ERROR(gang->Enum("provider", kGangProviderNames, out.gang.provider));
    KV_RETURN_IF_ERROR(gang->OptInt("minAvailable", out.gang.min_available, kMinGangMinAvailable));
  }
  return OkStatus();
}

Status ParseElastic(const ObjectReader& r, ElasticSpec& out) {
  KV_RETURN_IF_ERROR(r.OnlyKnown({"minReplicas", "maxReplicas", "timeoutSeconds", "resetLimit"}));
  KV_RETURN_IF_ERROR(r.Int("minReplicas", out.min_replicas, 1));
  KV_RETURN_IF_ERROR(r.Int("maxReplicas", out.max_replicas, 1));
  KV_RETURN_IF_ERROR(r.Int("timeoutSeconds", out.timeout_seconds, 1));
  if (out.timeout_seconds > 86400) return Bad(r.PathOf("timeoutSeconds"), "must be <= 86400");
  return r.OptInt("resetLimit", out.reset_limit, 0);
}

StatusOr<HorovodJobSpec> ParseSpec(const json& value, const std::string& path) {
  HorovodJobSpec spec;
  KV_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(value, path));
  KV_RETURN_IF_ERROR(r.OnlyKnown({"replicas", "template", "worker", "sidecar", "networking",
                                  "runPolicy", "schedulingPolicy", "elastic"}));
  if (r.Find("replicas") == nullptr) return Bad(r.PathOf("replicas"), "required");
  KV_RETURN_IF_ERROR(r.Int("replicas", spec.replicas, kMinReplicas));
  if (r.Find("template") == nullptr) return Bad(r.PathOf("template"), "required");
  KV_RETURN_IF_ERROR(ParseTemplate(*r.Find("template"), r.PathOf("template"), spec.pod_template));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> worker, r.Child("worker"));
  if (worker) KV_RETURN_IF_ERROR(ParseWorker(*worker, spec.worker));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> sidecar, r.Child("sidecar"));
  if (!sidecar) return Bad(r.PathOf("sidecar"), "required");
  KV_RETURN_IF_ERROR(ParseSidecar(*sidecar, spec.sidecar));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> networking, r.Child("networking"));
  if (networking) KV_RETURN_IF_ERROR(ParseNetworking(*networking, spec.networking));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> run_policy, r.Child("runPolicy"));
  if (run_policy) KV_RETURN_IF_ERROR(ParseRunPolicy(*run_policy, spec.run_policy));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> scheduling, r.Child("schedulingPolicy"));
  if (scheduling) KV_RETURN_IF_ERROR(ParseSchedulingPolicy(*scheduling, spec.scheduling_policy));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> elastic, r.Child("elastic"));
  if (elastic) KV_RETURN_IF_ERROR(ParseElastic(*elastic, spec.elastic.emplace()));
  return spec;
}

StatusOr<Condition> ParseCondition(const json& value, const std::string& path) {
  Condition c;
  KV_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(value, path));
  KV_RETURN_IF_ERROR(r.OnlyKnown(
      {"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"}));
  KV_RETURN_IF_ERROR(r.String("type", c.type));
  if (c.type.empty()) return Bad(r.PathOf("type"), "required");
  std::optional<ConditionStatus> status;
  KV_RETURN_IF_ERROR(r.Enum("status", kConditionStatusNames, status));
  if (!status) return Bad(r.PathOf("status"), "required");
  c.status = *status;
  KV_RETURN_IF_ERROR(r.Int("observedGeneration", c.observed_generation, 0));
  KV_RETURN_IF_ERROR(r.String("lastTransitionTime", c.last_transition_time));
  KV_RETURN_IF_ERROR(r.String("reason", c.reason));
  KV_RETURN_IF_ERROR(r.String("message", c.message));
  return c;
}

StatusOr<WorkerStatus> ParseWorkerStatus(const json& value, const std::string& path) {
  WorkerStatus w;
  KV_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(value, path));
  KV_RETURN_IF_ERROR(r.OnlyKnown({"rank", "pod", "node", "state", "reason", "message"}));
  KV_RETURN_IF_ERROR(r.Int("rank", w.rank, 0));
  KV_RETURN_IF_ERROR(r.String("pod", w.pod));
  KV_RETURN_IF_ERROR(r.String("node", w.node));
  std::optional<WorkerState> state;
  KV_RETURN_IF_ERROR(r.Enum("state", kWorkerStateNames, state));
  if (state) w.state = *state;
  KV_RETURN_IF_ERROR(r.String("reason", w.reason));
  KV_RETURN_IF_ERROR(r.String("message", w.message));
  return w;
}

StatusOr<FinishedRanks> ParseFinishedRanks(const json& value, const std::string& path) {
  FinishedRanks f;
  KV_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(value, path));
  KV_RETURN_IF_ERROR(r.OnlyKnown({"ranks", "state", "reason", "message"}));
  KV_RETURN_IF_ERROR(r.String("ranks", f.ranks));
  if (auto ranks = ParseRanges(f.ranks); !ranks.ok()) {
    return Bad(r.PathOf("ranks"), ranks.status().message());
  }
  std::optional<WorkerState> state;
  KV_RETURN_IF_ERROR(r.Enum("state", kWorkerStateNames, state));
  if (state != WorkerState::kSucceeded && state != WorkerState::kFailed) {
    return Bad(r.PathOf("state"), "must be Succeeded or Failed");
  }
  f.state = *state;
  KV_RETURN_IF_ERROR(r.String("reason", f.reason));
  KV_RETURN_IF_ERROR(r.String("message", f.message));
  return f;
}

// status.elastic. A status written before the compact form (world, workerIds: a list of pod
// names and of "<pod>.<uid>") is read into it, so an upgraded operator resumes such a job.
StatusOr<ElasticStatus> ParseElasticStatus(const ObjectReader& r) {
  ElasticStatus e;
  KV_RETURN_IF_ERROR(r.OnlyKnown({"epoch", "resets", "version", "members", "memberUids", "world",
                                  "workerIds", "rendezvousPort"}));
  KV_RETURN_IF_ERROR(r.Int("epoch", e.epoch, 0));
  KV_RETURN_IF_ERROR(r.Int("version", e.version, 0));
  KV_RETURN_IF_ERROR(r.Int("resets", e.resets, 0));
  KV_RETURN_IF_ERROR(r.Int("rendezvousPort", e.rendezvous_port, 0));
  std::string members, uids;
  KV_RETURN_IF_ERROR(r.String("members", members));
  KV_RETURN_IF_ERROR(r.String("memberUids", uids));
  auto indices = ParseRanges(members);
  if (!indices.ok()) return Bad(r.PathOf("members"), indices.status().message());
  e.members = std::move(indices).value();
  if (uids.size() != 8 * e.members.size()) {
    return Bad(r.PathOf("memberUids"), "must hold 8 hex digits for each of the " +
                                           std::to_string(e.members.size()) + " members");
  }
  for (size_t i = 0; i < e.members.size(); ++i) e.member_uids.push_back(uids.substr(8 * i, 8));
  if (const json* ids = r.Find("workerIds"); ids != nullptr && e.members.empty()) {
    if (!ids->is_array()) return Bad(r.PathOf("workerIds"), "must be an array");
    for (size_t i = 0; i < ids->size(); ++i) {
      const json& id = (*ids)[i];
      const std::string path = r.PathOf("workerIds") + "[" + std::to_string(i) + "]";
      if (!id.is_string()) return Bad(path, "must be a string");
      // "<job>-worker-<index>.<uid>": a uid has no '.', a job name may.
      const std::string text = id.get<std::string>();
      const size_t dot = text.rfind('.');
      const size_t dash = text.rfind('-', dot);
      auto index = dot == std::string::npos || dash == std::string::npos
                       ? StatusOr<std::vector<int64_t>>(InvalidArgument("no index"))
                       : ParseRanges(text.substr(dash + 1, dot - dash - 1));
      if (!index.ok() || index->size() != 1) return Bad(path, "must be \"<pod>.<uid>\"");
      e.members.push_back(index->front());
      e.member_uids.push_back(UidDigest(text.substr(dot + 1)));
    }
  }
  return e;
}

StatusOr<HorovodJobStatus> ParseStatus(const json& value, const std::string& path) {
  HorovodJobStatus s;
  KV_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(value, path));
  KV_RETURN_IF_ERROR(r.OnlyKnown({"phase", "conditions", "readyWorkers", "activeWorkers",
                                  "succeededWorkers", "failedWorkers", "restartCount", "startTime",
                                  "completionTime", "observedGeneration", "epoch", "worldSize",
                                  "epochStartTime", "workers", "unlistedWorkers", "finishedRanks",
                                  "rankSummary", "coordinatorAddress", "elastic"}));
  KV_RETURN_IF_ERROR(r.Enum("phase", kJobPhaseNames, s.phase));
  if (const json* conditions = r.Find("conditions")) {
    const std::string cpath = r.PathOf("conditions");
    if (!conditions->is_array()) {
      return Bad(cpath, std::string("must be an array, got ") + conditions->type_name());
    }
    for (size_t i = 0; i < conditions->size(); ++i) {
      KV_ASSIGN_OR_RETURN(Condition c,
                          ParseCondition((*conditions)[i], cpath + "[" + std::to_string(i) + "]"));
      s.conditions.push_back(std::move(c));
    }
  }
  KV_RETURN_IF_ERROR(r.Int("readyWorkers", s.ready_workers, 0));
  KV_RETURN_IF_ERROR(r.Int("activeWorkers", s.active_workers, 0));
  KV_RETURN_IF_ERROR(r.Int("succeededWorkers", s.succeeded_workers, 0));
  KV_RETURN_IF_ERROR(r.Int("failedWorkers", s.failed_workers, 0));
  KV_RETURN_IF_ERROR(r.Int("restartCount", s.restart_count, 0));
  KV_RETURN_IF_ERROR(r.String("startTime", s.start_time));
  KV_RETURN_IF_ERROR(r.String("completionTime", s.completion_time));
  KV_RETURN_IF_ERROR(r.Int("observedGeneration", s.observed_generation, 0));
  KV_RETURN_IF_ERROR(r.Int("epoch", s.epoch, 0));
  KV_RETURN_IF_ERROR(r.Int("worldSize", s.world_size, 0));
  KV_RETURN_IF_ERROR(r.String("epochStartTime", s.epoch_start_time));
  if (const json* workers = r.Find("workers")) {
    const std::string wpath = r.PathOf("workers");
    if (!workers->is_array()) {
      return Bad(wpath, std::string("must be an array, got ") + workers->type_name());
    }
    for (size_t i = 0; i < workers->size(); ++i) {
      KV_ASSIGN_OR_RETURN(WorkerStatus w,
                          ParseWorkerStatus((*workers)[i], wpath + "[" + std::to_string(i) + "]"));
      s.workers.push_back(std::move(w));
    }
  }
  KV_RETURN_IF_ERROR(r.Int("unlistedWorkers", s.unlisted_workers, 0));
  if (const json* finished = r.Find("finishedRanks")) {
    const std::string fpath = r.PathOf("finishedRanks");
    if (!finished->is_array()) {
      return Bad(fpath, std::string("must be an array, got ") + finished->type_name());
    }
    for (size_t i = 0; i < finished->size(); ++i) {
      const std::string item = fpath + "[" + std::to_string(i) + "]";
      KV_ASSIGN_OR_RETURN(FinishedRanks f, ParseFinishedRanks((*finished)[i], item));
      s.finished_ranks.push_back(std::move(f));
    }
  }
  KV_RETURN_IF_ERROR(r.String("rankSummary", s.rank_summary));
  KV_RETURN_IF_ERROR(r.String("coordinatorAddress", s.coordinator_address));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> elastic, r.Child("elastic"));
  if (elastic) {
    KV_ASSIGN_OR_RETURN(s.elastic, ParseElasticStatus(*elastic));
  }
  return s;
}

Status ParseMetadata(const ObjectReader& r, ObjectMeta& out) {
  // ObjectMeta has many fields the operator does not read; unknown ones are fine here.
  KV_RETURN_IF_ERROR(r.String("name", out.name));
  KV_RETURN_IF_ERROR(r.String("namespace", out.namespace_name));
  KV_RETURN_IF_ERROR(r.String("uid", out.uid));
  KV_RETURN_IF_ERROR(r.String("resourceVersion", out.resource_version));
  KV_RETURN_IF_ERROR(r.Int("generation", out.generation, 0));
  KV_ASSIGN_OR_RETURN(std::optional<ObjectReader> labels, r.Child("labels"));
  if (labels) {
    for (const auto& [k, v] : r.Find("labels")->items()) {
      if (!v.is_string()) return Bad(labels->PathOf(k), "must be a string");
      out.labels[k] = v.get<std::string>();
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<HorovodJob> HorovodJobFromJson(const json& object) {
  HorovodJob job;
  KV_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Open(object, "object"));
  std::string api_version, kind;
  KV_RETURN_IF_ERROR(r.String("apiVersion", api_version));
  KV_RETURN_IF_ERROR(r.String("kind", kind));
  if (api_version != kApiVersion) {
    return Bad("apiVersion",
               "must be " + std::string(kApiVersion) + ", got \"" + api_version + "\"");
  }
  if (kind != kKind) return Bad("kind", "must be " + std::string(kKind) + ", got \"" + kind + "\"");
  const json* metadata = r.Find("metadata");
  if (metadata == nullptr) return Bad("metadata", "required");
  KV_ASSIGN_OR_RETURN(ObjectReader meta, ObjectReader::Open(*metadata, "metadata"));
  KV_RETURN_IF_ERROR(ParseMetadata(meta, job.metadata));
  if (job.metadata.name.empty()) return Bad("metadata.name", "required");
  const json* spec = r.Find("spec");
  if (spec == nullptr) return Bad("spec", "required");
  KV_ASSIGN_OR_RETURN(job.spec, ParseSpec(*spec, "spec"));
  if (const json* status = r.Find("status")) {
    KV_ASSIGN_OR_RETURN(job.status, ParseStatus(*status, "status"));
  }
  return job;
}

StatusOr<HorovodJobSpec> HorovodJobSpecFromJson(const json& spec) {
  return ParseSpec(spec, "spec");
}

StatusOr<HorovodJobStatus> HorovodJobStatusFromJson(const json& status) {
  return ParseStatus(status, "status");
}

json ToJson(const Condition& c) {
  return json{{"type", c.type},
              {"status", std::string(Name(c.status))},
              {"observedGeneration", c.observed_generation},
              {"lastTransitionTime", c.last_transition_time},
              {"reason", c.reason},
              {"message", c.message}};
}

json ToJson(const HorovodJobStatus& s) {
  json out = json::object();
  if (s.phase) out["phase"] = std::string(Name(*s.phase));
  json conditions = json::array();
  for (const Condition& c : s.conditions) conditions.push_back(ToJson(c));
  out["conditions"] = std::move(conditions);
  out["readyWorkers"] = s.ready_workers;
  out["activeWorkers"] = s.active_workers;
  out["succeededWorkers"] = s.succeeded_workers;
  out["failedWorkers"] = s.failed_workers;
  out["restartCount"] = s.restart_count;
  if (!s.start_time.empty()) out["startTime"] = s.start_time;
  if (!s.completion_time.empty()) out["completionTime"] = s.completion_time;
  out["observedGeneration"] = s.observed_generation;
  out["epoch"] = s.epoch;
  if (s.world_size > 0) out["worldSize"] = s.world_size;
  if (!s.epoch_start_time.empty()) out["epochStartTime"] = s.epoch_start_time;
  if (!s.workers.empty()) {
    json workers = json::array();
    for (const WorkerStatus& w : s.workers) {
      json o = {{"rank", w.rank}, {"pod", w.pod}, {"state", std::string(Name(w.state))}};
      if (!w.node.empty()) o["node"] = w.node;
      if (!w.reason.empty()) o["reason"] = w.reason;
      if (!w.message.empty()) o["message"] = w.message;
      workers.push_back(std::move(o));
    }
    out["workers"] = std::move(workers);
  }
  if (s.unlisted_workers > 0) out["unlistedWorkers"] = s.unlisted_workers;
  if (!s.finished_ranks.empty()) {
    json finished = json::array();
    for (const FinishedRanks& f : s.finished_ranks) {
      json o = {{"ranks", f.ranks}, {"state", std::string(Name(f.state))}};
      if (!f.reason.empty()) o["reason"] = f.reason;
      if (!f.message.empty()) o["message"] = f.message;
      finished.push_back(std::move(o));
    }
    out["finishedRanks"] = std::move(finished);
  }
  if (!s.rank_summary.empty()) out["rankSummary"] = s.rank_summary;
  if (!s.coordinator_address.empty()) out["coordinatorAddress"] = s.coordinator_address;
  if (s.elastic) {
    std::string uids;
    for (const std::string& u : s.elastic->member_uids) uids += u;
    out["elastic"] = json{{"epoch", s.elastic->epoch},
                          {"resets", s.elastic->resets},
                          {"version", s.elastic->version},
                          {"members", FormatRanges(s.elastic->members)},
                          {"memberUids", uids},
                          {"rendezvousPort", s.elastic->rendezvous_port}};
  }
  return out;
}

}  // namespace korovod::k8s_operator
