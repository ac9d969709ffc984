#include "operator/manager/operator_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>

namespace korovod::k8s_operator {
namespace {

StatusOr<int> ParseInt(const std::string& flag, const std::string& v, int lo, int hi) {
  int out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < lo || out > hi) {
    return InvalidArgument(flag + "=" + v + ": expected an integer in [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "]");
  }
  return out;
}

StatusOr<std::chrono::milliseconds> ParseSeconds(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(s) || s <= 0 || s > 3600) {
    return InvalidArgument(flag + "=" + v + ": expected seconds in (0, 3600], e.g. 2 or 0.5");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

StatusOr<double> ParseQps(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double q = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(q) || q < 0 || q > 100000) {
    return InvalidArgument(flag + "=" + v +
                           ": expected requests per second in [0, 100000] (0: "
                           "no limit), e.g. 50 or 12.5");
  }
  return q;
}

}  // namespace

StatusOr<HostPort> SplitHostPort(const std::string& flag, const std::string& value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument(flag + "=" + value + ": expected HOST:PORT, e.g. 0.0.0.0:8080");
  }
  HostPort out;
  out.host = value.substr(0, colon);
  if (out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  KV_ASSIGN_OR_RETURN(out.port, ParseInt(flag, value.substr(colon + 1), 0, 65535));
  return out;
}

std::string OperatorUsage() {
  return R"(usage: korovod-operator [flags]
  --kubeconfig PATH                      kubeconfig (default: $KUBECONFIG, else in-cluster)
  --context NAME                         kubeconfig context (default: current-context)
  --namespace NS                         watch only NS (default: all namespaces)
  --metrics-bind-address HOST:PORT       /metrics, /healthz, /readyz (default 0.0.0.0:8080)
  --workers N                            concurrent reconciles (default 2)
  --leader-elect                         run as one of several replicas; one leads (Lease)
  --leader-election-namespace NS         the Lease's namespace (default: --namespace or default)
  --leader-election-id NAME              the Lease's name (default korovod-operator)
  --leader-election-lease-duration S     (default 15)
  --leader-election-renew-deadline S     (default 10)
  --leader-election-retry-period S       (default 2)
  --identity NAME                        this replica's name in the Lease (default host-pid)
  --watch-timeout-seconds N              server-side timeout of each watch (default 300)
  --kube-api-qps Q                       client-side limit on API requests per second, watches
                                         excluded (default 50; 0: none)
  --kube-api-burst N                     requests allowed at once above it (default 100)
  --sidecar-image IMAGE                  used when a job names none
  --coordinator-port PORT                rank 0's rendezvous port (default 28500)
  --sidecar-metrics-port PORT            the sidecar's /metrics and probes (default 9090)
  --host-network-port-min PORT           hostNetwork workers take per-job ports in
  --host-network-port-max PORT           [min, max] (default 20000-28999)
  --cluster-domain DOMAIN                (default cluster.local)
  --elastic-rendezvous-host HOST         the address elastic jobs' sidecars dial for this
                                         operator's membership servers (its pod IP); without
                                         it elastic jobs fail naming the flag
  --elastic-rendezvous-port PORT         the one port of the leader's membership listener for
                                         every elastic job (the chart: 29400); 0 (default):
                                         the port a job's status names, else any
  --webhook-bind-address HOST:PORT       serve the sidecar injection webhook (HTTPS, POST /inject)
  --webhook-cert-dir DIR                 its tls.crt + tls.key, re-read on rotation
                                         (default /etc/korovod/webhook)
  --webhook-cert-secret NS/NAME          own the certificate: keep a CA and serving certificate
                                         in this Secret (created when absent, invalid or near
                                         expiry) and write them to --webhook-cert-dir at start
  --webhook-dns-names A,B,...            the serving certificate's DNS names (with the Secret)
  --webhook-configuration NAME           MutatingWebhookConfiguration whose caBundle to set
  --webhook-setup-timeout S              deadline of the Secret and caBundle setup (default 120)
  --webhook-ca-bundle-check-period S     then re-check the caBundle against the CA Secret
                                         (restore, follow a rotation; default 60)
  --worker-network-policy NS:K=V,...     give each job a NetworkPolicy: its workers accept only
                                         its own workers and the operator's pods (namespace NS,
                                         labels K=V); default off
)";
}

namespace {

// "NAMESPACE:KEY=VALUE[,KEY=VALUE...]" (see OperatorUsage); "" turns it off.
Status ParseWorkerNetworkPolicy(const std::string& flag, const std::string& v,
                                WorkerNetworkPolicySettings* out) {
  *out = WorkerNetworkPolicySettings{};
  if (v.empty()) return OkStatus();
  const std::string expected =
      ": expected NAMESPACE:KEY=VALUE[,KEY=VALUE...] (the operator's "
      "namespace and its pods' labels)";
  const size_t colon = v.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == v.size()) {
    return InvalidArgument(flag + "=" + v + expected);
  }
  for (size_t start = colon + 1; start <= v.size();) {
    const size_t comma = std::min(v.find(',', start), v.size());
    const std::string item = v.substr(start, comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument(flag + "=" + v + ": \"" + item + "\" is not KEY=VALUE" + expected);
    }
    out->operator_pod_labels[item.substr(0, eq)] = item.substr(eq + 1);
    start = comma + 1;
  }
  out->operator_namespace = v.substr(0, colon);
  return OkStatus();
}

}  // namespace

StatusOr<OperatorOptions> ParseOperatorFlags(const std::vector<std::string>& args) {
  OperatorOptions o;
  using Setter = std::function<Status(const std::string&, const std::string&)>;
  auto str = [](std::string* dst) -> Setter {
    return [dst](const std::string& flag, const std::string& v) {
      if (v.empty()) return InvalidArgument(flag + " needs a non-empty value");
      *dst = v;
      return OkStatus();
    };
  };
  auto integer = [](int* dst, int lo, int hi) -> Setter {
    return [=](const std::string& flag, const std::string& v) {
      KV_ASSIGN_OR_RETURN(*dst, ParseInt(flag, v, lo, hi));
      return OkStatus();
    };
  };
  auto host_port = [](std::string* dst) -> Setter {
    return [dst](const std::string& flag, const std::string& v) {
      KV_RETURN_IF_ERROR(SplitHostPort(flag, v).status());
      *dst = v;
      return OkStatus();
    };
  };
  auto seconds = [](std::chrono::milliseconds* dst) -> Setter {
    return [=](const std::string& flag, const std::string& v) {
      KV_ASSIGN_OR_RETURN(*dst, ParseSeconds(flag, v));
      return OkStatus();
    };
  };
  const std::map<std::string, Setter> valued = {
      {"--kubeconfig", str(&o.kubeconfig)},
      {"--context", str(&o.context)},
      {"--namespace", str(&o.namespace_name)},
      {"--metrics-bind-address", host_port(&o.metrics_bind_address)},
      {"--identity", str(&o.identity)},
      {"--leader-election-namespace", str(&o.leader_election_namespace)},
      {"--leader-election-id", str(&o.leader_election_id)},
      {"--leader-election-lease-duration", seconds(&o.lease_duration)},
      {"--leader-election-renew-deadline", seconds(&o.renew_deadline)},
      {"--leader-election-retry-period", seconds(&o.retry_period)},
      {"--workers", integer(&o.workers, 1, 64)},
      {"--watch-timeout-seconds", integer(&o.watch_timeout_seconds, 1, 3600)},
      {"--kube-api-qps",
       [&o](const std::string& flag, const std::string& v) {
         KV_ASSIGN_OR_RETURN(o.kube_api_qps, ParseQps(flag, v));
         return OkStatus();
       }},
      {"--kube-api-burst", integer(&o.kube_api_burst, 1, 100000)},
      {"--sidecar-image", str(&o.settings.default_sidecar_image)},
      {"--coordinator-port", integer(&o.settings.coordinator_port, 1, 65535)},
      {"--sidecar-metrics-port", integer(&o.settings.metrics_port, 1, 65535)},
      {"--host-network-port-min", integer(&o.settings.host_network_port_min, 1024, 65535)},
      {"--host-network-port-max", integer(&o.settings.host_network_port_max, 1024, 65535)},
      {"--cluster-domain", str(&o.settings.cluster_domain)},
      {"--elastic-rendezvous-host", str(&o.settings.elastic_rendezvous_host)},
      {"--elastic-rendezvous-port", integer(&o.elastic_rendezvous_port, 0, 65535)},
      {"--webhook-bind-address", host_port(&o.webhook_bind_address)},
      {"--webhook-cert-dir", str(&o.webhook_cert_dir)},
      {"--webhook-cert-secret",
       [&o](const std::string& flag, const std::string& v) {
         const size_t slash = v.find('/');
         if (slash == std::string::npos || slash == 0 || slash + 1 == v.size() ||
             v.find('/', slash + 1) != std::string::npos) {
           return InvalidArgument(flag + "=" + v + ": expected NAMESPACE/NAME");
         }
         o.webhook_cert_secret_namespace = v.substr(0, slash);
         o.webhook_cert_secret_name = v.substr(slash + 1);
         return OkStatus();
       }},
      {"--webhook-dns-names",
       [&o](const std::string& flag, const std::string& v) {
         o.webhook_dns_names.clear();
         for (size_t start = 0; start <= v.size();) {
           const size_t comma = std::min(v.find(',', start), v.size());
           if (comma == start) return InvalidArgument(flag + "=" + v + ": an empty name");
           o.webhook_dns_names.push_back(v.substr(start, comma - start));
           start = comma + 1;
         }
         return OkStatus();
       }},
      {"--webhook-configuration", str(&o.webhook_configuration)},
      {"--worker-network-policy",
       [&o](const std::string& flag, const std::string& v) {
         return ParseWorkerNetworkPolicy(flag, v, &o.settings.worker_network_policy);
       }},
      {"--webhook-setup-timeout", seconds(&o.webhook_setup_timeout)},
      {"--webhook-ca-bundle-check-period", seconds(&o.webhook_ca_bundle_check_period)},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag == "--leader-elect") {
      if (has_value && value != "true" && value != "false") {
        return InvalidArgument("--leader-elect=" + value + ": expected true or false");
      }
      o.leader_elect = !has_value || value == "true";
      continue;
    }
    auto it = valued.find(flag);
    if (it == valued.end()) {
      return InvalidArgument("unknown flag " + args[i] + " (see --help)");
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgument(flag + " needs a value");
      value = args[++i];
    }
    KV_RETURN_IF_ERROR(it->second(flag, value));
  }
  if (o.renew_deadline >= o.lease_duration) {
    return InvalidArgument(
        "--leader-election-renew-deadline must be shorter than "
        "--leader-election-lease-duration");
  }
  if (o.retry_period >= o.renew_deadline) {
    return InvalidArgument(
        "--leader-election-retry-period must be shorter than "
        "--leader-election-renew-deadline");
  }
  if (o.settings.host_network_port_max - o.settings.host_network_port_min < 1) {
    return InvalidArgument("--host-network-port-max (" +
                           std::to_string(o.settings.host_network_port_max) +
                           ") must be above --host-network-port-min (" +
                           std::to_string(o.settings.host_network_port_min) + ")");
  }
  if (!o.webhook_cert_secret_name.empty() && o.webhook_dns_names.empty()) {
    return InvalidArgument("--webhook-cert-secret needs --webhook-dns-names");
  }
  if (!o.webhook_configuration.empty() && o.webhook_cert_secret_name.empty()) {
    return InvalidArgument("--webhook-configuration needs --webhook-cert-secret");
  }
  if (o.leader_election_namespace.empty()) {
    o.leader_election_namespace = o.namespace_name.empty() ? "default" : o.namespace_name;
  }
  return o;
}

}  // namespace korovod::k8s_operator
