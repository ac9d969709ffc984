#include "operator/manager/action_executor.h"

#include "common/log.h"
#include "operator/kube/api_result.h"
#include "operator/manager/child_resource.h"

namespace korovod::k8s_operator {

Status ActionExecutor::CheckMayWrite() const {
  if (!may_write_ || may_write_()) return OkStatus();
  return Unavailable(
      "not written: this replica no longer holds the leader lease (its last renewal is older "
      "than the renew deadline); the new leader reconciles");
}

Status ActionExecutor::Execute(const nlohmann::json& job, const Action& action) const {
  // A deposed leader's worker may still be mid-reconcile when the lease is lost (a pause longer
  // than the lease ends with every thread running on): its writes would race the new leader's.
  KV_RETURN_IF_ERROR(CheckMayWrite());
  switch (action.kind) {
    case Action::Kind::kCreate: {
      const nlohmann::json meta = action.object.value("metadata", nlohmann::json::object());
      KV_ASSIGN_OR_RETURN(kube::ResourceRef ref, ResourceOf(action.object.value("apiVersion", ""),
                                                            action.object.value("kind", "")));
      kube::ApiResult r = client_.Create(ref.Path(meta.value("namespace", "")), action.object);
      if (!r.ok() && !kube::IsAlreadyExists(r)) {
        std::string what = "create " + Describe(action.object) + " (" + action.reason + ")";
        // A 404 on create: the cluster does not serve this kind at all (a gang scheduler's
        // PodGroup CRD that is not installed); say so rather than "not found".
        if (kube::IsNotFound(r)) {
          what += ": the API " + ref.ApiVersion() + " " + ref.plural +
                  " is not served by this cluster; is its scheduler (CRD) installed?";
        }
        return r.status().WithContext(what);
      }
      if (r.ok()) {
        metrics_.creates->Increment();
        KV_LOG(kInfo, kOperator, "created %s (%s)", Describe(action.object).c_str(),
               action.reason.c_str());
      }
      return OkStatus();
    }
    case Action::Kind::kDelete:
    case Action::Kind::kDeleteJob: {
      KV_ASSIGN_OR_RETURN(std::string path, ObjectPath(action.object));
      kube::DeleteOptions opts;
      opts.precondition_uid = action.object["metadata"].value("uid", "");
      opts.propagation_policy = "Background";
      // A pod stuck terminating (its kubelet is gone): only grace 0 removes it without one.
      if (action.force) opts.grace_period_seconds = 0;
      kube::ApiResult r = client_.Delete(path, opts);
      // 409 on a uid precondition: the name now belongs to a newer object; leave it.
      if (!r.ok() && !kube::IsNotFound(r) && !kube::IsConflict(r)) {
        return r.status().WithContext("delete " + Describe(action.object) + " (" + action.reason +
                                      ")");
      }
      if (r.ok()) {
        (action.kind == Action::Kind::kDelete ? metrics_.deletes : metrics_.job_deletions)
            ->Increment();
        KV_LOG(kInfo, kOperator, "%s %s (%s)", action.force ? "force-deleted" : "deleted",
               Describe(action.object).c_str(), action.reason.c_str());
      }
      return OkStatus();
    }
    case Action::Kind::kEvent: {
      const auto type =
          action.event_type == "Warning" ? kube::EventType::kWarning : kube::EventType::kNormal;
      KV_LOG_AT(
          type == kube::EventType::kWarning ? logging::Level::kWarning : logging::Level::kInfo,
          logging::Subsystem::kOperator, "event %s %s: %s: %s", action.event_type.c_str(),
          Describe(job).c_str(), action.reason.c_str(), action.message.c_str());
      nlohmann::json involved = job;
      involved["apiVersion"] = kHorovodJobs.ApiVersion();
      involved["kind"] = "HorovodJob";
      kube::ApiResult r = events_.Record(involved, type, action.reason, action.message);
      // Events are best effort: a failure is logged, never a reason to re-run the reconcile
      // (which would record the same event again).
      if (!r.ok())
        KV_LOG(kWarning, kOperator, "cannot record event: %s", r.status().ToString().c_str());
      else
        metrics_.events->Increment();
      return OkStatus();
    }
    case Action::Kind::kReplaceStatus: {
      KV_ASSIGN_OR_RETURN(kube::ResourceRef ref, ResourceOf(action.object.value("apiVersion", ""),
                                                            action.object.value("kind", "")));
      const nlohmann::json meta = action.object.value("metadata", nlohmann::json::object());
      kube::ApiResult r = client_.Replace(
          ref.Path(meta.value("namespace", ""), meta.value("name", ""), "status"), action.object);
      // A 409 (Kueue wrote meanwhile) fails the reconcile, which reads the object again.
      if (!r.ok()) {
        return r.status().WithContext("update the status of " + Describe(action.object) + " (" +
                                      action.reason + ")");
      }
      KV_LOG(kInfo, kOperator, "updated the status of %s (%s)", Describe(action.object).c_str(),
             action.reason.c_str());
      return OkStatus();
    }
  }
  return Internal("unknown action kind");
}

}  // namespace korovod::k8s_operator
