// WorkerIdentity: where one worker sits in its world, which is all that differs between a
// HorovodJob's pods and pods the injection webhook configures (a StatefulSet's, an Indexed Job's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "operator/controller/worker_ports.h"

namespace korovod::k8s_operator {

struct WorkerIdentity {
  int64_t rank = 0;   // the pod's first rank (its local rank 0)
  int64_t size = 0;   // ranks in the world
  int64_t ranks = 1;  // ranks in this pod: rank .. rank + ranks - 1 (spec.worker.ranksPerWorker)
  int64_t index = 0;  // the pod's index among the workers (its cross rank)
  int64_t workers = 1;
  std::string coordinator;       // "host:port" of rank 0's rendezvous
  std::string key_secret;        // the Secret whose item "key" is the job key
  std::string shm_prefix;        // "/korovod-<world>-<rank>-": unique per pod on a node
  std::optional<int64_t> epoch;  // HorovodJob pods only
  WorkerPorts ports;             // the coordinator's (rank 0) and this worker's metrics port
  bool host_network = false;     // ports are the node's: declared so the scheduler sees them
  // How long the sidecar's rendezvous may take (KOROVOD_START_TIMEOUT_SECONDS); its startup probe
  // allows as long.
  int64_t start_timeout_seconds = 0;
  // An elastic job's worker (spec.elastic): no fixed rank. Its sidecar joins the operator's
  // membership server at `elastic_rendezvous` ("host:port") as worker "<pod_name>.<pod uid>"
  // (the uid from the downward API: a replacement of the same name is another worker), and each
  // epoch gives it its rank.
  std::string elastic_rendezvous;
  int64_t elastic_timeout_seconds = 0;
  std::string pod_name;
};

}  // namespace korovod::k8s_operator
