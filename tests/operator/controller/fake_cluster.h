// FakeCluster: an in-memory namespace for driving Reconcile as a loop, the way the executor
// will: observe, reconcile, apply the actions (creates add objects with a fresh uid, deletes
// remove them or, with graceful deletion, mark them terminating), replace the status. Helpers
// play the kubelet's part (pod phases, exit codes, readiness).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "operator/controller/reconciler.h"

namespace korovod::k8s_operator::testing {

// A 64-hex-digit key, as the executor would pass.
inline constexpr const char* kTestKeyHex =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

// A valid job "j" in namespace "ns" with `replicas` workers and a trainer container.
nlohmann::json MinimalJob(int replicas = 2);

// The first event action with `reason` in `r`, or nullptr.
const Action* FindEvent(const ReconcileResult& r, const std::string& reason);

class FakeCluster {
 public:
  explicit FakeCluster(nlohmann::json job) : job_(std::move(job)) {}

  // Deletes set metadata.deletionTimestamp (the time the grace period ends, as the API server
  // does: the delete's time plus spec.terminationGracePeriodSeconds, default 30) and
  // deletionGracePeriodSeconds instead of removing; FinishTerminations removes. A force delete
  // (grace period 0) removes at once either way.
  void set_graceful_deletes(bool on) { graceful_deletes_ = on; }

  ObservedState Observe(int64_t now) const;
  // Observe, Reconcile, Apply; returns what Reconcile returned.
  ReconcileResult Step(int64_t now);
  // Applies at the time of the last Step (graceful deletes need a time).
  void Apply(const ReconcileResult& result);
  // Steps until a reconcile creates and deletes nothing (at most `max_steps`).
  void Settle(int64_t now, int max_steps = 10);
  void FinishTerminations();

  nlohmann::json& job() { return job_; }
  nlohmann::json& spec() { return job_["spec"]; }
  nlohmann::json status() const;
  bool job_deleted() const { return job_deleted_; }
  const std::vector<Action>& events() const { return events_; }

  std::vector<nlohmann::json>& pods() { return pods_; }
  std::vector<nlohmann::json>& services() { return services_; }
  std::vector<nlohmann::json>& config_maps() { return config_maps_; }
  std::vector<nlohmann::json>& secrets() { return secrets_; }
  std::vector<nlohmann::json>& pod_groups() { return pod_groups_; }
  std::vector<nlohmann::json>& network_policies() { return network_policies_; }
  // The operator's flags as Observe passes them (defaults otherwise).
  OperatorSettings& settings() { return settings_; }
  // Kueue's side: the Workload (at most one), the ResourceFlavors, the priority the executor
  // resolved, and every status the reconciler wrote to the Workload.
  std::vector<nlohmann::json>& workloads() { return workloads_; }
  std::vector<nlohmann::json>& resource_flavors() { return resource_flavors_; }
  void set_workload_priority(nlohmann::json p) { workload_priority_ = std::move(p); }
  const std::vector<Action>& status_writes() const { return status_writes_; }
  // The pod of that name, or nullptr.
  nlohmann::json* Pod(const std::string& name);
  std::vector<std::string> PodNames() const;

  // Kubelet stand-ins.
  void SetPodPhase(const std::string& name, const std::string& phase);
  void SetAllPodsPhase(const std::string& phase);
  void SetPodReady(const std::string& name, bool ready);
  void SetTrainerExit(const std::string& name, int exit_code, const std::string& reason);
  void RemovePod(const std::string& name);
  // The control plane's part in a disruption: a DisruptionTarget=True condition with `reason`
  // (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet).
  void SetDisruptionTarget(const std::string& name, const std::string& reason,
                           const std::string& message);
  // A container (an init container when `init`) waiting with `reason` (ImagePullBackOff,
  // CrashLoopBackOff, ...) and `message`, as the kubelet reports it; replaces that list's
  // statuses. An empty reason sets state.running instead (the container started).
  void SetContainerWaiting(const std::string& name, const std::string& container,
                           const std::string& reason, const std::string& message,
                           bool init = false);
  // The scheduler's verdict: PodScheduled=False, reason Unschedulable, with `message`.
  void SetUnschedulable(const std::string& name, const std::string& message);
  // A graceful delete issued at `now` by someone else (eviction, preemption, kubectl delete).
  void MarkTerminating(const std::string& name, int64_t now, int64_t grace_seconds = 30);

 private:
  std::vector<nlohmann::json>* ListFor(const std::string& kind);
  std::vector<nlohmann::json> workloads_, resource_flavors_;
  nlohmann::json workload_priority_;
  std::vector<Action> status_writes_;

  nlohmann::json job_;
  std::vector<nlohmann::json> pods_, services_, config_maps_, secrets_, pod_groups_;
  std::vector<nlohmann::json> network_policies_;
  OperatorSettings settings_;
  std::vector<Action> events_;
  bool graceful_deletes_ = false;
  bool job_deleted_ = false;
  int next_uid_ = 1;
  int64_t now_ = 0;  // of the last Step
};

}  // namespace korovod::k8s_operator::testing
