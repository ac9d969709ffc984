// HorovodJob (korovod.dev/v1alpha1): the custom resource's C++ types and the constants its CRD
// schema shares (defaults, enums, minimums). tests/operator/api/api_test.cc checks
// crds/korovod.dev_horovodjobs.yaml against these constants so the two cannot drift.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/env_names.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kGroup = "korovod.dev";
inline constexpr std::string_view kVersion = "v1alpha1";
inline constexpr std::string_view kApiVersion = "korovod.dev/v1alpha1";
inline constexpr std::string_view kKind = "HorovodJob";
inline constexpr std::string_view kPlural = "horovodjobs";
inline constexpr std::string_view kShortName = "hvdjob";

// The trainer container in spec.template: the one with this name, or the only container.
inline constexpr std::string_view kTrainerContainerName = "trainer";
// The name the operator gives the injected sidecar; a template container may not take it.
inline constexpr std::string_view kSidecarContainerName = "korovod-sidecar";

// Defaults and bounds; the CRD schema carries the same numbers.
inline constexpr int64_t kMinReplicas = 1;
inline constexpr std::string_view kDefaultRdmaResourceName = "rdma/hca";
inline constexpr int64_t kDefaultBackoffLimit = 3;
inline constexpr bool kDefaultSuspend = false;
inline constexpr int64_t kMinActiveDeadlineSeconds = 1;
inline constexpr int64_t kMinGangMinAvailable = 1;
// How long an epoch's workers may take to come up (scheduled, images pulled, every sidecar in the
// world) before the job fails naming the ranks that never came. Image pulls and autoscaled nodes
// take minutes; a wait without a bound is a job that shows Pending for ever.
inline constexpr int64_t kDefaultStartupTimeoutSeconds = 600;
inline constexpr int64_t kMinStartupTimeoutSeconds = 1;
// spec.elastic: as korovodrun's --elastic-timeout default (Horovod's too).
inline constexpr int64_t kDefaultElasticTimeoutSeconds = 600;
inline constexpr int64_t kMaxStartupTimeoutSeconds = 86400;  // the sidecar's bound, a day
// spec.runPolicy.managedBy: absent or this value means this operator reconciles the job; any
// other value (Kueue's MultiKueue sets "kueue.x-k8s.io/multikueue") hands the job to that
// controller and the operator leaves it, status included, alone.
inline constexpr std::string_view kManagedByThisOperator = "korovod.dev/horovodjob-controller";

enum class CleanPodPolicy { kRunning, kAll, kNone };
inline constexpr std::array<std::string_view, 3> kCleanPodPolicyNames = {"Running", "All", "None"};
inline constexpr CleanPodPolicy kDefaultCleanPodPolicy = CleanPodPolicy::kRunning;

enum class GangProvider { kVolcano, kSchedulerPlugins };
inline constexpr std::array<std::string_view, 2> kGangProviderNames = {"volcano",
                                                                       "scheduler-plugins"};

enum class JobPhase { kPending, kRunning, kRestarting, kSucceeded, kFailed, kSuspended };
inline constexpr std::array<std::string_view, 6> kJobPhaseNames = {
    "Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"};

enum class ConditionStatus { kTrue, kFalse, kUnknown };
inline constexpr std::array<std::string_view, 3> kConditionStatusNames = {"True", "False",
                                                                          "Unknown"};

// One rank of the current epoch, as status.workers reports it. Missing: no pod (not yet created,
// or lost while running). Pending: the pod is not running (unscheduled, pulling, its sidecar in
// rendezvous). Running: the pod runs and is not Ready. Ready: the PodReady condition is True.
enum class WorkerState { kMissing, kPending, kRunning, kReady, kSucceeded, kFailed, kTerminating };
inline constexpr std::array<std::string_view, 7> kWorkerStateNames = {
    "Missing", "Pending", "Running", "Ready", "Succeeded", "Failed", "Terminating"};

std::string_view Name(CleanPodPolicy v);
std::string_view Name(GangProvider v);
std::string_view Name(JobPhase v);
std::string_view Name(ConditionStatus v);
std::string_view Name(WorkerState v);

struct RdmaSpec {
  std::string resource_name{kDefaultRdmaResourceName};
  int64_t count = 0;  // devices of resource_name per worker; 0 = no RDMA
};

struct WorkerSpec {
  int64_t gpus = 0;  // nvidia.com/gpu per worker
  // Ranks per worker pod (the trainer command runs once per local rank, one sidecar serves them
  // all); 0 (unset): gpus when set, else 1. RanksPerWorker() resolves it.
  int64_t ranks_per_worker = 0;
  RdmaSpec rdma;
};

inline int64_t RanksPerWorker(const WorkerSpec& w) {
  if (w.ranks_per_worker > 0) return w.ranks_per_worker;
  return w.gpus > 0 ? w.gpus : 1;
}

struct EngineSpec {
  std::optional<int64_t> fusion_threshold_bytes;  // unset: the engine's default
  std::optional<double> cycle_time_ms;            // unset: the engine's default
  std::string timeline;                           // path of the Timeline file; empty = off
};

// One more engine setting for the sidecar (KOROVOD_AUTOTUNE=1, KOROVOD_STALL_...): every engine
// variable of docs/configuration.md can be set, except those the operator sets itself.
struct EnvEntry {
  std::string name;
  std::string value;
  bool operator==(const EnvEntry&) const = default;
};

// Variables the operator writes into the sidecar (identity and rendezvous) or derives from a spec
// field: spec.sidecar.env may not set them (Validate names the field to use instead). The
// builders' test checks that every variable they set is listed here.
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 17>
    kSidecarEnvSetByOperator = {{
        {env::kRank, "the worker's index x spec.worker.ranksPerWorker"},
        {env::kSize, "spec.replicas x spec.worker.ranksPerWorker"},
        {env::kSidecarRanks, "spec.worker.ranksPerWorker"},
        {env::kLocalSize, "spec.worker.ranksPerWorker"},
        {env::kCrossRank, "the worker's index"},
        {env::kCrossSize, "spec.replicas"},
        {env::kCoordinator, "rank 0's rendezvous address"},
        {env::kSocket, "the operator's socket volume"},
        {env::kJobKey, "the job key Secret"},
        {env::kShmPrefix, "the operator's shared-memory naming"},
        {env::kMetricsPort, "the operator's --sidecar-metrics-port"},
        {env::kIface, "spec.networking.interface"},
        {env::kFusionThreshold, "spec.sidecar.engine.fusionThresholdBytes"},
        {env::kCycleTime, "spec.sidecar.engine.cycleTimeMs"},
        {env::kTimeline, "spec.sidecar.engine.timeline"},
        {env::kStartTimeoutSeconds, "spec.runPolicy.startupTimeoutSeconds"},
        {env::kEpoch, "the world's generation (status.epoch)"},
    }};

struct SidecarSpec {
  std::string image;
  nlohmann::json resources = nlohmann::json::object();  // core/v1 ResourceRequirements, as is
  EngineSpec engine;
  std::vector<EnvEntry> env;  // appended to the sidecar's env, in order
};

struct NetworkingSpec {
  bool host_network = false;
  std::string interface_name;  // empty: the engine picks
};

struct RunPolicy {
  CleanPodPolicy clean_pod_policy = kDefaultCleanPodPolicy;
  int64_t backoff_limit = kDefaultBackoffLimit;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  bool suspend = kDefaultSuspend;
  int64_t startup_timeout_seconds = kDefaultStartupTimeoutSeconds;
  std::string managed_by;  // empty: this operator
};

struct GangSpec {
  bool enabled = false;
  std::optional<GangProvider> provider;
  std::optional<int64_t> min_available;  // unset: replicas
};

struct SchedulingPolicy {
  std::string scheduler_name;
  std::string priority_class_name;
  GangSpec gang;
};

// spec.elastic: the world follows the live workers instead of restarting (docs/elastic.md). A
// lost worker shrinks it, a replacement or a new replica grows it, each as a membership epoch
// formed by the operator's membership server.
struct ElasticSpec {
  int64_t min_replicas = 1;
  int64_t max_replicas = 0;  // 0 (unset): spec.replicas
  int64_t timeout_seconds = kDefaultElasticTimeoutSeconds;
  std::optional<int64_t> reset_limit;  // unset: no limit
};

inline int64_t MaxReplicas(const ElasticSpec& e, int64_t replicas) {
  return e.max_replicas > 0 ? e.max_replicas : replicas;
}

struct HorovodJobSpec {
  int64_t replicas = 0;
  std::optional<ElasticSpec> elastic;
  nlohmann::json pod_template = nlohmann::json::object();  // core/v1 PodTemplateSpec, as is
  WorkerSpec worker;
  SidecarSpec sidecar;
  NetworkingSpec networking;
  RunPolicy run_policy;
  SchedulingPolicy scheduling_policy;
};

// Ranks in the world: replicas x ranks per worker.
inline int64_t WorldSize(const HorovodJobSpec& spec) {
  return spec.replicas * RanksPerWorker(spec.worker);
}

// metav1.Condition.
struct Condition {
  std::string type;
  ConditionStatus status = ConditionStatus::kUnknown;
  int64_t observed_generation = 0;
  std::string last_transition_time;  // RFC 3339
  std::string reason;
  std::string message;
};

// status.workers[i]: a rank of the current epoch that is not Ready (nor Succeeded: those are in
// status.finishedRanks), with its pod and why. Ready ranks appear only in status.rankSummary, so
// the status of a running job stays small whatever its size.
struct WorkerStatus {
  int64_t rank = 0;
  std::string pod;
  std::string node;  // spec.nodeName; empty until scheduled
  WorkerState state = WorkerState::kMissing;
  std::string reason;   // CamelCase, when Kubernetes or the operator gives one
  std::string message;  // why it is not running, or how it ended
  bool operator==(const WorkerStatus&) const = default;
};

// status.workers lists at most this many ranks (those with a reason first, then by rank); the
// rest are counted in status.unlistedWorkers and all of them are in status.rankSummary. 128
// entries of ~300 bytes keep a 4096-rank job's status far below etcd's object limit while every
// rank starts.
inline constexpr size_t kMaxListedWorkers = 128;

// status.finishedRanks[i]: ranks of the current epoch whose worker ended in `state` (Succeeded
// or Failed) for `reason`, as ranges ("0-3,7"). Kept when the pod is gone (PodGC, a removed
// node), so a finished rank is neither taken for a lost one nor started again. Ranks are the
// workers' indices (the number in "<job>-worker-<i>"). One entry per state and reason; message
// is the lowest rank's (an exit code, a disruption).
struct FinishedRanks {
  std::string ranks;
  WorkerState state = WorkerState::kSucceeded;
  std::string reason;
  std::string message;
  bool operator==(const FinishedRanks&) const = default;
};

// status.elastic: the membership of an elastic job, as its membership server formed it. Compact
// at any size: the members are worker indices by rank (as ranges in rank order), and each
// member's pod uid is kept only as an 8-hex-digit digest, enough for a new leader to rebuild the
// worker ids ("<pod>.<uid>") from the observed pods and to tell a replacement of the same index
// from the member itself.
struct ElasticStatus {
  int64_t epoch = 0;  // the last membership epoch formed (0: none yet)
  int64_t resets = 0;
  int64_t version = 0;                   // the membership version the epoch formed at
  std::vector<int64_t> members;          // worker indices by rank
  std::vector<std::string> member_uids;  // per member, UidDigest of its pod's uid
  int64_t rendezvous_port = 0;           // the membership server's port on the operator
  bool operator==(const ElasticStatus&) const = default;
};

// 8 lowercase hex digits (FNV-1a, 32 bits) of a pod uid: status.elastic.memberUids.
std::string UidDigest(std::string_view uid);

struct HorovodJobStatus {
  std::optional<JobPhase> phase;
  std::vector<Condition> conditions;
  int64_t ready_workers = 0;
  int64_t active_workers = 0;
  int64_t succeeded_workers = 0;
  int64_t failed_workers = 0;
  int64_t restart_count = 0;
  std::string start_time;       // RFC 3339; empty = unset
  std::string completion_time;  // RFC 3339; empty = unset
  int64_t observed_generation = 0;
  int64_t epoch = 0;
  // The current epoch's world: its size (spec.replicas when the epoch started; a change of
  // spec.replicas from it starts a new epoch) and when its worker pods were created (the
  // start-up timeout counts from then).
  int64_t world_size = 0;
  std::string epoch_start_time;  // RFC 3339; empty = unset
  std::vector<WorkerStatus> workers;
  int64_t unlisted_workers = 0;  // ranks not Ready left out of workers (kMaxListedWorkers)
  std::vector<FinishedRanks> finished_ranks;
  // every rank in one line for `kubectl get -o wide` (a column shows one JSONPath value): the ranks
  // in each state, as ranges, e.g. "Ready:0-2,4 Pending:3".
  std::string rank_summary;
  std::string coordinator_address;
  std::optional<ElasticStatus> elastic;
};

// The parts of metav1.ObjectMeta the operator reads.
struct ObjectMeta {
  std::string name;
  std::string namespace_name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
};

struct HorovodJob {
  ObjectMeta metadata;
  HorovodJobSpec spec;
  HorovodJobStatus status;
};

}  // namespace korovod::k8s_operator
