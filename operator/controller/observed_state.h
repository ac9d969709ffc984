// ObservedState: everything one reconcile of one HorovodJob may look at. The caller (the executor)
// reads it from the API server / informer cache and supplies the clock and the randomness, so
// Reconcile is deterministic and testable without a cluster.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

struct ObservedState {
  // The HorovodJob as read from the API: metadata (uid, generation, deletionTimestamp), spec,
  // status.
  nlohmann::json job;
  // Children in the job's namespace labelled korovod.dev/job-name=<job>. Items of a List response
  // may lack apiVersion/kind; the reconciler does not need them.
  std::vector<nlohmann::json> pods, services, config_maps, secrets, pod_groups;
  // Only with --worker-network-policy (network_policy.h); else always empty.
  std::vector<nlohmann::json> network_policies;
  // Kueue (kueue_workload.h), for a job labelled kueue.x-k8s.io/queue-name: its Workload when it
  // exists, the ResourceFlavors the Workload's admission names, and the job's priority as Kueue
  // wants it in the Workload ({group, kind, name, value} of its WorkloadPriorityClass or
  // PriorityClass; null when it has none).
  std::optional<nlohmann::json> workload;
  std::vector<nlohmann::json> resource_flavors;
  nlohmann::json workload_priority;
  // An elastic job's membership server as this operator hosts it (manager/elastic_servers.h),
  // read just before this reconcile; unset while none runs for the job.
  struct ElasticServer {
    int port = 0;
    int64_t epoch = 0;                 // the last membership epoch formed (0: none yet)
    std::vector<std::string> members;  // worker ids by rank
    int64_t resets = 0;
    uint64_t formed_version = 0;    // the membership version that epoch formed at
    std::string failure;            // non-empty: the job cannot go on (below the minimum, ...)
    std::vector<std::string> lost;  // live workers that never joined within the timeout
  };
  std::optional<ElasticServer> elastic_server;
  // Nodes whose Ready condition is not True: an elastic job's workers there are lost (a static
  // job waits for Kubernetes to evict them).
  std::set<std::string> unready_nodes;
  int64_t now_unix = 0;  // seconds since the epoch
  // How long this operator has observed each time a deadline is timed from, in seconds by its own
  // monotonic clock since it first read the value (manager/observed_ages.h), keyed
  // ObservedAgeKey(field, value): the status's startTime, epochStartTime and completionTime, and
  // each terminating pod's deletionTimestamp (field "deletionTimestamp/<pod uid>"). The reconciler
  // times activeDeadlineSeconds, ttlSecondsAfterFinished, startupTimeoutSeconds and a stuck pod's
  // force deletion with these when present instead of comparing a time another clock wrote (an
  // earlier leader's, the API server's) with now_unix, so a clock hours ahead ends nothing early
  // (after a failover a deadline may end up to its length late). A value absent (written by this
  // reconcile, or a caller that gives none: the unit tests) is timed with now_unix.
  std::map<std::string, int64_t> observed_ages;
  std::string fresh_key_hex;  // 64 hex chars; used only when the key Secret must be created
  OperatorSettings settings;
};

inline std::string ObservedAgeKey(std::string_view field, std::string_view value) {
  std::string key(field);
  key += '=';
  key += value;
  return key;
}

}  // namespace korovod::k8s_operator
