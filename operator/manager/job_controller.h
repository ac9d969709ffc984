// JobController: the HorovodJob control loop. Informers watch HorovodJobs and the children the
// operator labels (pods, services, config maps; never Secrets: the job's key Secret is read by
// name at each reconcile, so the operator needs no list/watch on Secrets); any change queues the
// owning job's key;
// workers take keys off the rate-limited queue, read the job fresh from the API server (so its
// resourceVersion is current for the /status write), run the pure Reconcile on it and the cached
// children it controls (label to find them, controller ownerReference uid to claim them: a job
// recreated under a deleted one's name must not adopt that one's pods), and apply the result with
// ActionExecutor. A failed reconcile is re-queued with
// backoff; a requested requeue (deadline, TTL) is honoured with AddAfter.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

namespace korovod::k8s_operator {

struct JobControllerOptions {
  std::string namespace_name;  // "" = all namespaces
  int workers = 2;
  int watch_timeout_seconds = 300;
  OperatorSettings settings;
  int elastic_port = 0;   // ElasticServers' listener port
  WriteFence may_write;  // asked before every write (ActionExecutor); empty: always
};

class JobController {
 public:
  JobController(const kube::ApiClient& client, const kube::EventRecorder& events,
                OperatorMetrics& metrics, JobControllerOptions options);
  ~JobController();  // Stop()
  JobController(const JobController&) = delete;
  JobController& operator=(const JobController&) = delete;

  void StartInformers();
  bool Synced() const;
  // Starts the workers (once this replica may write: it leads, or runs alone) and queues every
  // known job, so a new leader reconciles everything once.
  void StartWorkers();
  // Shuts the queue down, joins the workers, stops the informers. Idempotent.
  void Stop();

  std::map<std::string, int> JobsByPhase() const;
  size_t QueueDepth() const { return queue_.Len(); }
  ElasticServers& elastic_servers() { return elastic_; }  // fencing token, deposition

 private:
  void EnqueueJob(const nlohmann::json& job);
  void EnqueueOwner(const nlohmann::json& child);
  void Work();
  // One reconcile of "ns/name"; sets *requeue_after_seconds when the result asks for it.
  Status ReconcileKey(const std::string& key, std::optional<int64_t>* requeue_after_seconds);
  ObservedState Observe(const nlohmann::json& job) const;

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
  // Nodes, for elastic jobs (a worker on an unready node is lost). Only when watching every
  // namespace (a Role cannot grant nodes); not waited for by Synced().
  std::unique_ptr<kube::Informer> nodes_;
  ElasticServers elastic_;  // after queue_: its watcher queues jobs
  mutable ObservedAges ages_;  // deadlines timed by this operator's clock (Observe)
  std::vector<std::thread> workers_;
  std::atomic<bool> stopped_{false};
};

}  // namespace korovod::k8s_operator
