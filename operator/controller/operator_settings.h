// OperatorSettings: the operator-wide knobs the reconciler needs (flags of the operator binary,
// not fields of a HorovodJob), passed in so the reconciler stays a pure function.
#pragma once

#include <map>
#include <string>

namespace korovod::k8s_operator {

// --worker-network-policy NAMESPACE:KEY=VALUE,...: the operator's namespace and its pods'
// labels, the only sources besides the job's own workers that worker pods accept (a
// NetworkPolicy per job, network_policy.h). Off while operator_namespace is empty.
struct WorkerNetworkPolicySettings {
  std::string operator_namespace;
  std::map<std::string, std::string> operator_pod_labels;
  bool enabled() const { return !operator_namespace.empty(); }
};

struct OperatorSettings {
  // Used when spec.sidecar.image is empty (the CRD requires it today; kept for older objects).
  std::string default_sidecar_image = "korovod/sidecar:latest";
  int coordinator_port = 28500;
  int metrics_port = 9090;  // the sidecar's /metrics, /healthz, /readyz
  // hostNetwork workers share the node's ports: each world takes a block in this range
  // (worker_ports.h). Below 29000: clear of torchrun's 29500 and of the ephemeral range.
  int host_network_port_min = 20000;
  int host_network_port_max = 28999;
  // A pod-local emptyDir shared by trainer and sidecar; the socket is socket_dir + "/sidecar.sock".
  std::string socket_dir = "/var/run/korovod";
  std::string cluster_domain = "cluster.local";
  // The address elastic jobs' sidecars dial for this operator's membership servers (its pod IP,
  // or a name that resolves to it); each job's server has its own port.
  std::string elastic_rendezvous_host;
  WorkerNetworkPolicySettings worker_network_policy;
};

}  // namespace korovod::k8s_operator
