#include "operator/manager/operator_metrics.h"

#include "operator/api/types.h"

namespace korovod::k8s_operator {

StatusOr<std::unique_ptr<OperatorMetrics>> OperatorMetrics::Create(
    http::MetricsRegistry& registry) {
  auto m = std::make_unique<OperatorMetrics>();
  KV_ASSIGN_OR_RETURN(m->reconcile_duration,
                      registry.GetHistogram("korovod_operator_reconcile_duration_seconds",
                                            "Time to reconcile one HorovodJob.",
                                            {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}));
  KV_ASSIGN_OR_RETURN(m->reconciles, registry.GetCounter("korovod_operator_reconcile_total",
                                                         "HorovodJob reconciles run."));
  KV_ASSIGN_OR_RETURN(m->reconcile_errors,
                      registry.GetCounter("korovod_operator_reconcile_errors_total",
                                          "Reconciles that failed and were re-queued."));
  KV_ASSIGN_OR_RETURN(m->status_conflicts,
                      registry.GetCounter("korovod_operator_status_conflicts_total",
                                          "Status writes answered 409 Conflict (re-read)."));
  const std::string actions_help = "Actions the operator applied, by kind.";
  KV_ASSIGN_OR_RETURN(m->creates, registry.GetCounter("korovod_operator_actions_total",
                                                      actions_help, {{"action", "create"}}));
  KV_ASSIGN_OR_RETURN(m->deletes, registry.GetCounter("korovod_operator_actions_total",
                                                      actions_help, {{"action", "delete"}}));
  KV_ASSIGN_OR_RETURN(m->events, registry.GetCounter("korovod_operator_actions_total", actions_help,
                                                     {{"action", "event"}}));
  KV_ASSIGN_OR_RETURN(m->job_deletions,
                      registry.GetCounter("korovod_operator_actions_total", actions_help,
                                          {{"action", "delete_job"}}));
  KV_ASSIGN_OR_RETURN(m->workqueue_depth,
                      registry.GetGauge("korovod_operator_workqueue_depth",
                                        "HorovodJob keys waiting to be reconciled."));
  KV_ASSIGN_OR_RETURN(m->leader, registry.GetGauge("korovod_operator_leader",
                                                   "1 while this replica is the leader."));
  KV_ASSIGN_OR_RETURN(
      m->rate_limit_wait,
      registry.GetHistogram("korovod_operator_kube_api_rate_limit_wait_seconds",
                            "Time an API request waited for the client-side rate limit "
                            "(--kube-api-qps, --kube-api-burst).",
                            {0, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30}));
  for (std::string_view phase : kJobPhaseNames) {
    KV_ASSIGN_OR_RETURN(m->jobs_by_phase_[std::string(phase)],
                        registry.GetGauge("korovod_operator_jobs", "HorovodJobs by phase.",
                                          {{"phase", std::string(phase)}}));
  }
  for (const char* outcome : {"injected", "unchanged", "denied", "error"}) {
    KV_ASSIGN_OR_RETURN(m->webhook_reviews[outcome],
                        registry.GetCounter("korovod_operator_webhook_reviews_total",
                                            "Sidecar injection admission reviews, by outcome.",
                                            {{"outcome", outcome}}));
  }
  return m;
}

void OperatorMetrics::SetJobsByPhase(const std::map<std::string, int>& counts) {
  for (auto& [phase, gauge] : jobs_by_phase_) {
    auto it = counts.find(phase);
    gauge->Set(it == counts.end() ? 0 : it->second);
  }
}

}  // namespace korovod::k8s_operator
