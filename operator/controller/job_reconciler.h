// JobReconciler: one reconcile of one valid HorovodJob (Reconcile, reconciler.h), as a class
// whose rules are split by concept over reconciler.cc (the run, the actions, an unfinished job),
// reconciler_epochs.cc (a static job's epochs: failures, resizes, creation, phases),
// reconciler_status.cc (counts and the per-rank status), reconciler_finish.cc (finishing,
// deadlines, cleanPodPolicy, TTL), reconciler_kueue.cc (Kueue admission) and
// reconciler_elastic.cc (spec.elastic). Internal to operator/controller: only Reconcile is its
// interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/action.h"
#include "operator/controller/elastic_members.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/observed_state.h"
#include "operator/controller/operator_settings.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/worker_pod_state.h"
#include "operator/controller/worker_status.h"

namespace korovod::k8s_operator::internal {

using json = nlohmann::json;

// Seconds since the epoch of a time this reconciler wrote (startTime, completionTime), or
// nullopt when it does not parse.
std::optional<int64_t> UnixSeconds(const std::string& rfc3339);
std::vector<json> SortedByName(const std::vector<json>& objects);
const json* FindByName(const std::vector<json>& objects, const std::string& name);
bool Terminating(const json& object);
// The reference a kDelete carries. List items may lack apiVersion/kind, so the caller names them.
json DeleteReference(const json& child, std::string_view api_version, std::string_view kind,
                     const std::string& namespace_name);
std::chrono::system_clock::time_point TimePoint(int64_t unix_seconds);
// Writes the status only when it differs from what the API server holds.
void SetStatusIfChanged(const json& job, const HorovodJobStatus& status, ReconcileResult& out);
// Reconcile again within `seconds` (the earliest of the requests wins).
void Requeue(ReconcileResult& out, int64_t seconds);

// One reconcile of a valid job. Holds the observed state and accumulates actions and status.
class JobReconciler {
 public:
  JobReconciler(const ObservedState& observed, HorovodJob job);
  ReconcileResult Run();

 private:
  struct Failure {
    std::string cause;  // "worker pod X ...": a disrupted worker's if any, else the lowest rank's
    int count = 0;      // failed, being deleted, or (once Running) missing workers
    // A worker the control plane took away (DisruptionTarget) is among them: the restart is not
    // the job's fault and does not count against backoffLimit, as podFailurePolicy's Ignore on
    // DisruptionTarget for Jobs. Its peers failing alongside (they lose a rank) do not change
    // that.
    bool disruption = false;
  };

  // reconciler.cc: the run, actions and the unfinished job
  bool Finished() const;
  std::optional<int64_t> ObservedAge(std::string_view field, const std::string& value) const;
  int64_t SecondsSince(std::string_view field, const std::string& value, int64_t value_unix) const;
  void Mark(std::string_view type, bool value, std::string_view reason, const std::string& msg);
  void MarkIfPresent(std::string_view type, bool value, std::string_view reason,
                     const std::string& msg);
  void Event(std::string_view type, std::string_view reason, std::string message);
  void Create(json object, std::string why);
  void Delete(const json& child, std::string_view api_version, std::string_view kind,
              std::string why);
  void DeletePod(const json& pod, std::string why);
  void ForceDeleteIfStuck(const json& pod, const std::string& why);
  void EnsureSharedChildren();
  void Suspend(std::string_view reason, const std::string& message);
  void ReconcileActive();

  // reconciler_elastic.cc
  static std::string WorkerId(const WorkerPodState& s);
  static std::string LeaveCause(const std::string& id,
                                const std::map<std::string, std::string>& why);
  std::optional<std::string> ElasticJobKey() const;
  // An elastic job's pods of the current generation, as one reconcile sorts them.
  struct ElasticPods {
    ObservedWorkers pods;
    std::set<std::string> names;                  // every pod's name (their indices are taken)
    std::map<std::string, std::string> gone_why;  // by worker id: why it left the world
    std::vector<std::string> live;                // worker ids of the running present pods
    std::vector<const json*> present;             // active pods that count toward replicas
    std::string first_failure, first_success;
    int64_t failures = 0, running = 0;
  };
  void ReconcileElastic();
  void CollectElasticPods(ElasticPods& e);
  void ClassifyElasticPods(ElasticPods& e);
  void CountRecordedEnds(ElasticPods& e);
  void RecordMembership(const ElasticPods& e, ElasticStatus& es);
  void DirectElasticServer(const ElasticPods& e, const ElasticStatus& es);
  void ScaleElastic(const std::vector<const json*>& present, const std::set<std::string>& names);
  void ReportElasticWorkers(const ObservedWorkers& pods);

  // reconciler_kueue.cc
  std::string GateOnKueue();
  void ReleaseKueueQuotaIfStopped();
  void FinishKueueWorkload();
  void ReplaceWorkloadStatus(json workload, std::string why);

  // reconciler_finish.cc
  void Finish(JobPhase phase, std::string_view reason, const std::string& message);
  void CleanUpFinished();
  bool DeadlineExpired();
  void RequeueForDeadline();
  bool StartupTimedOut();

  // reconciler_status.cc
  void Count();
  void RecordOutcomes();
  void PublishRanks();
  void ReportWorkers();
  void ReportNotStarting();
  bool AllPresentOrSucceeded() const;

  // reconciler_epochs.cc
  void PartitionPods();
  Failure FindFailure() const;
  bool RestartAfter(const Failure& failure);
  void NewEpoch();
  void MaybeResize();
  void EnsureEpochChildren();
  void CreateMissingWorkers();
  void UpdatePhase();

  const ObservedState& observed_;
  const OperatorSettings& settings_;
  HorovodJob job_;
  HorovodJobStatus status_;
  std::chrono::system_clock::time_point now_;
  int64_t generation_;
  std::string trainer_container_;
  std::vector<json> pods_;
  std::map<int64_t, std::pair<WorkerPodState, const json*>> current_;
  std::vector<const json*> stale_;
  std::set<std::string> deleted_;
  FinishedRankRecord finished_;          // status.finishedRanks, updated from the pods
  std::vector<WorkerStatus> ranks_;      // every rank's entry (status.workers lists some)
  std::vector<std::string> member_ids_;  // an elastic job's members' worker ids, by rank
  bool key_ready_ = true;
  bool pod_group_ready_ = true;
  std::optional<WorkloadState> workload_;  // a queued job's Workload, as observed
  std::string_view kueue_hold_reason_;
  ReconcileResult out_;
};

}  // namespace korovod::k8s_operator::internal
