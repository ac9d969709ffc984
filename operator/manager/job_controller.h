// JobController: the HorovodJob control loop. Informers watch HorovodJobs and the children the
// operator labels (pods, services, config maps, and Kueue Workloads where Kueue's API is served);
// any change queues the owning job's key. Workers take keys off the rate-limited queue, take the
// job from the informer's cache (a stale copy costs a 409 on the status write, which re-reads:
// status_writer.h), run the pure Reconcile on it and the cached children it controls (label to
// find them, controller ownerReference uid to claim them: a job recreated under a deleted one's
// name must not adopt that one's pods), and apply the result with ActionExecutor. A failed
// reconcile is re-queued with backoff; a requested requeue (deadline, TTL) is honoured with
// AddAfter. At rest the operator sends no request but its watches (and the leader's renewals).
//
// What is cached is trimmed at ingest (cache_trim.h). Nodes are watched only while an elastic
// job exists (a worker on an unready node is lost), and only by an operator watching every
// namespace (a Role cannot grant nodes). Secrets are never listed or watched (that would hand
// the operator every credential in the cluster): the job's key Secret is read by name, once, and
// kept by job uid (it is immutable). Kueue Workloads and PodGroups are watched where their CRDs
// are served at start; else they are read by name per reconcile and the reconciler polls the
// Workloads (a log line says so at start). An elastic job's pod
// set is not acted on while the pod cache has not yet seen this operator's own creates and
// deletes (pod_expectations.h).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/action.h"
#include "operator/controller/observed_state.h"
#include "operator/controller/operator_settings.h"
#include "operator/kube/api_client.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"
#include "operator/kube/work_queue.h"
#include "operator/manager/action_executor.h"
#include "operator/manager/elastic_servers.h"
#include "operator/manager/observed_ages.h"
#include "operator/manager/operator_metrics.h"
#include "operator/manager/pod_expectations.h"

namespace korovod::k8s_operator {

struct JobControllerOptions {
  std::string namespace_name;  // "" = all namespaces
  int workers = 2;
  int watch_timeout_seconds = 300;
  OperatorSettings settings;
  // How long an elastic job waits for the pod cache to see its own creates and deletes.
  std::chrono::steady_clock::duration expectations_timeout = PodExpectations::kDefaultTimeout;
  int elastic_port = 0;  // ElasticServers' listener port
  WriteFence may_write;  // asked before every write (ActionExecutor); empty: always
};

class JobController {
 public:
  JobController(const kube::ApiClient& client, const kube::EventRecorder& events,
                OperatorMetrics& metrics, JobControllerOptions options);
  ~JobController();  // Stop()
  JobController(const JobController&) = delete;
  JobController& operator=(const JobController&) = delete;

  // Starts the informers; first asks the API server whether it serves Kueue's Workloads and the
  // gang schedulers' PodGroups (a discovery GET per API version) and watches those it serves.
  void StartInformers();
  bool Synced() const;
  // Starts the workers (once this replica may write: it leads, or runs alone) and queues every
  // known job, so a new leader reconciles everything once.
  void StartWorkers();
  // Shuts the queue down, joins the workers, stops the informers. Idempotent.
  void Stop();

  std::map<std::string, int> JobsByPhase() const;
  size_t QueueDepth() const { return queue_.Len(); }
  // Whether the Node informer runs now (while at least one elastic job exists).
  bool WatchingNodes() const;
  ElasticServers& elastic_servers() { return elastic_; }  // fencing token, deposition

 private:
  void OnJobEvent(const nlohmann::json& job, bool deleted);
  void EnqueueJob(const nlohmann::json& job);
  void EnqueueOwner(const nlohmann::json& child);
  // Starts the Node informer when the first elastic job appears, stops and drops it (and its
  // cache) when the last one goes.
  void TrackElastic(const std::string& key, bool elastic);
  // An informer on `ref` (the children the operator labels) when the API server serves it;
  // else null, and a log line says what happens instead (`fallback`).
  kube::Informer* StartChildInformer(const kube::ResourceRef& ref, const std::string& fallback);
  void Work();
  // One reconcile of "ns/name"; sets *requeue_after_seconds when the result asks for it.
  Status ReconcileKey(const std::string& key, std::optional<int64_t>* requeue_after_seconds);
  ObservedState Observe(const nlohmann::json& job) const;
  StatusOr<std::vector<nlohmann::json>> KeySecret(const nlohmann::json& job,
                                                  const HorovodJob& parsed);
  Status ObserveKueue(const HorovodJob& parsed, ObservedState& observed) const;
  Status ObservePodGroup(const HorovodJob& parsed, ObservedState& observed) const;
  Status ExecuteActions(const std::string& key, const nlohmann::json& job, bool elastic,
                        const std::vector<Action>& actions);

  const kube::ApiClient& client_;
  OperatorMetrics& metrics_;
  const JobControllerOptions options_;
  ActionExecutor executor_;
  kube::WorkQueue queue_;
  std::vector<std::pair<std::string, std::unique_ptr<kube::Informer>>> informers_;
  kube::Informer* jobs_ = nullptr;
  kube::Informer* pods_ = nullptr;
  kube::Informer* services_ = nullptr;
  kube::Informer* config_maps_ = nullptr;
  kube::Informer* network_policies_ = nullptr;  // only with --worker-network-policy
  // Optional CRDs, watched when served at StartInformers (asked once: crds_checked_).
  bool crds_checked_ = false;
  kube::Informer* workloads_ = nullptr;                // null: Kueue's API is not served
  std::map<std::string, kube::Informer*> pod_groups_;  // by API version; absent: not served
  // Nodes, for elastic jobs: running only while elastic_jobs_ is not empty. Not waited for by
  // Synced(). A shared_ptr: a reconcile reading it keeps it alive while the last job's delete
  // drops it.
  mutable std::mutex nodes_mu_;
  std::shared_ptr<kube::Informer> nodes_;
  std::set<std::string> elastic_jobs_;  // keys
  // Key Secrets by job uid (immutable once created: never re-read once seen).
  std::mutex secrets_mu_;
  std::map<std::string, nlohmann::json> key_secrets_;
  PodExpectations expectations_;
  ElasticServers elastic_;     // after queue_: its watcher queues jobs
  mutable ObservedAges ages_;  // deadlines timed by this operator's clock (Observe)
  std::vector<std::thread> workers_;
  std::atomic<bool> stopped_{false};
};

}  // namespace korovod::k8s_operator
