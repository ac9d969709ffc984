// JobReconciler, Kueue (kueue_workload.h): a job in a LocalQueue runs only while its Workload is
// admitted, and gives the quota back once stopped or finished.
#include <string>
#include <utility>
#include <vector>

#include "operator/api/conditions.h"
#include "operator/controller/job_reconciler.h"
#include "operator/controller/json_access.h"
#include "operator/controller/reasons.h"

namespace korovod::k8s_operator::internal {

// For a job in a LocalQueue: "" when its Workload is admitted (the pods then carry the
// admitted flavors), else why the job holds, with kueue_hold_reason_ set. Creates the Workload
// and replaces one that no longer describes the job's pods (once they are gone). Where the
// Workload is not watched (observed_.workload_watched), the job is looked at again soon.
std::string JobReconciler::GateOnKueue() {
  const std::string queue = QueueName(job_);
  const std::string waiting =
      "waiting for Kueue to admit Workload " + WorkloadName(job_) + " (LocalQueue " + queue + ")";
  kueue_hold_reason_ = kReasonQueued;
  if (!observed_.workload) {
    Create(BuildWorkload(job_, observed_.workload_priority, settings_),
           "Kueue Workload in LocalQueue " + queue);
    if (!observed_.workload_watched) Requeue(out_, kKueueWaitPollSeconds);
    return waiting;
  }
  workload_ = ObserveWorkload(*observed_.workload, job_, settings_);
  if (!observed_.workload_watched) Requeue(out_, kKueueWaitPollSeconds);
  if (workload_->evicted) {
    kueue_hold_reason_ = kReasonEvictedByKueue;
    return "evicted by Kueue (" + workload_->evicted_reason + ": " + workload_->evicted_message +
           "); its workers are stopped until Kueue admits it again";
  }
  if (!workload_->matches) {
    // The spec changed (replicas, the template): the Workload's quota no longer covers the
    // pods. Stop them, then replace the Workload, which Kueue admits anew.
    if (pods_.empty()) {
      Delete(*observed_.workload, kWorkloadApiVersion, kWorkloadKind,
             "the job's spec changed; a new Workload follows");
    }
    return "the spec changed: replacing Workload " + WorkloadName(job_) +
           ", then waiting for Kueue to admit it (LocalQueue " + queue + ")";
  }
  if (!workload_->admitted) return waiting;
  std::vector<json> flavors;
  for (const std::string& name : workload_->flavors) {
    if (const json* f = FindByName(observed_.resource_flavors, name)) flavors.push_back(*f);
  }
  ApplyFlavors(job_.spec.pod_template, flavors);
  json& meta = job_.spec.pod_template["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (!meta.contains("labels") || !meta["labels"].is_object()) meta["labels"] = json::object();
  if (!meta.contains("annotations") || !meta["annotations"].is_object()) {
    meta["annotations"] = json::object();
  }
  meta["labels"][std::string(kKueuePodSetLabel)] = std::string(kWorkerPodSetName);
  meta["annotations"][std::string(kKueueWorkloadAnnotation)] = WorkloadName(job_);
  if (!observed_.workload_watched) {
    out_.requeue_after_seconds.reset();
    Requeue(out_, kKueueRunPollSeconds);  // an eviction sends no event either
  }
  return "";
}

// After an eviction, once no worker pod remains, the quota goes back to Kueue (and the Workload
// back into its queue when preempted), as Kueue's jobframework does for its own job kinds.
void JobReconciler::ReleaseKueueQuotaIfStopped() {
  if (!workload_ || !workload_->evicted || !workload_->quota_reserved) return;
  if (!pods_.empty()) return;  // their deletions wake the next reconcile
  const bool requeue =
      workload_->evicted_reason == "Preempted" || workload_->evicted_reason == "NodeFailures";
  ReplaceWorkloadStatus(
      WorkloadWithCondition(*observed_.workload, "Requeued", requeue, workload_->evicted_reason,
                            workload_->evicted_message, observed_.now_unix,
                            /*clear_admission=*/true),
      "the job stopped after its eviction: quota released");
}

// A finished job's Workload is marked Finished, which releases its quota.
void JobReconciler::FinishKueueWorkload() {
  if (QueueName(job_).empty() || !observed_.workload) return;
  if (ObserveWorkload(*observed_.workload, job_, settings_).finished) return;
  const bool succeeded = status_.phase == JobPhase::kSucceeded;
  const Condition* c =
      FindCondition(status_.conditions, succeeded ? kConditionSucceeded : kConditionFailed);
  ReplaceWorkloadStatus(
      WorkloadWithCondition(*observed_.workload, "Finished", true,
                            succeeded ? "Succeeded" : "Failed",
                            c != nullptr ? c->message : std::string("the job finished"),
                            observed_.now_unix, /*clear_admission=*/false),
      "the job finished");
}

void JobReconciler::ReplaceWorkloadStatus(json workload, std::string why) {
  workload["apiVersion"] = std::string(kWorkloadApiVersion);
  workload["kind"] = std::string(kWorkloadKind);
  out_.actions.push_back(
      Action{Action::Kind::kReplaceStatus, std::move(workload), "", std::move(why), ""});
}

}  // namespace korovod::k8s_operator::internal
