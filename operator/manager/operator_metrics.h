// OperatorMetrics: korovod-operator's Prometheus metrics (served at /metrics):
//   korovod_operator_jobs{phase}                    jobs by status.phase (gauge, set per scrape)
//   korovod_operator_reconcile_duration_seconds     reconcile latency (histogram)
//   korovod_operator_reconcile_total                reconciles run (counter)
//   korovod_operator_reconcile_errors_total         reconciles that failed and were re-queued
//   korovod_operator_status_conflicts_total         /status writes answered 409 (then re-read)
//   korovod_operator_actions_total{action}          creates, deletes, events, job deletions
//   korovod_operator_workqueue_depth                keys waiting (gauge, set per scrape)
//   korovod_operator_leader                         1 while this replica leads, else 0
//   korovod_operator_kube_api_rate_limit_wait_seconds   each API request's wait for the
//                                                   client-side rate limit (histogram; 0s count)
//   korovod_operator_webhook_reviews_total{outcome} admission reviews: injected, unchanged,
//                                                   denied, error
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/http/metrics_registry.h"
#include "common/status.h"

namespace korovod::k8s_operator {

class OperatorMetrics {
 public:
  static StatusOr<std::unique_ptr<OperatorMetrics>> Create(http::MetricsRegistry& registry);

  http::Histogram* reconcile_duration = nullptr;
  http::Counter* reconciles = nullptr;
  http::Counter* reconcile_errors = nullptr;
  http::Counter* status_conflicts = nullptr;
  http::Counter* creates = nullptr;
  http::Counter* deletes = nullptr;
  http::Counter* events = nullptr;
  http::Counter* job_deletions = nullptr;
  http::Gauge* workqueue_depth = nullptr;
  http::Gauge* leader = nullptr;
  http::Histogram* rate_limit_wait = nullptr;
  std::map<std::string, http::Counter*, std::less<>> webhook_reviews;  // by outcome

  // Sets korovod_operator_jobs for every phase (absent phases read 0).
  void SetJobsByPhase(const std::map<std::string, int>& counts);

 private:
  std::map<std::string, http::Gauge*> jobs_by_phase_;
};

}  // namespace korovod::k8s_operator
