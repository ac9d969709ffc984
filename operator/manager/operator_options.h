// OperatorOptions: korovod-operator's command line. Every error names the flag.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

struct OperatorOptions {
  std::string kubeconfig;      // "" = $KUBECONFIG, else the pod's service account
  std::string context;         // kubeconfig context; "" = current-context
  std::string namespace_name;  // the namespace to watch; "" = all
  std::string metrics_bind_address = "0.0.0.0:8080";  // /metrics, /healthz, /readyz
  std::string identity;  // leader-election identity; "" = host name + pid
  bool leader_elect = false;
  std::string leader_election_namespace;  // "" = the watched namespace, else "default"
  std::string leader_election_id = "korovod-operator";
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  int workers = 2;
  int watch_timeout_seconds = 300;
  // Client-side rate limit of API requests (watches excluded), as client-go's QPS and Burst.
  // 50/s with a burst of 100: a 1000-worker job's pods are all created in about 20 s
  // ((1000 - 100) / 50 = 18 s of waiting), with every 3rd token of a minute left for status
  // writes, events and other jobs; an API server's default per-client fairness share is well
  // above it. 0 = no limit.
  double kube_api_qps = 50;
  int kube_api_burst = 100;
  // The one port of the leader's elastic membership listener (the pods' env names it, so a new
  // leader serves where the old one did); 0: the port a job's status names, else any.
  int elastic_rendezvous_port = 0;
  std::string webhook_bind_address;                       // "" = no injection webhook
  std::string webhook_cert_dir = "/etc/korovod/webhook";  // tls.crt + tls.key
  // The operator's own CA and serving certificate (webhook_certificate_setup.h): kept in this
  // Secret, written to webhook_cert_dir at start; "" = the files come from elsewhere
  // (cert-manager, a mounted Secret).
  std::string webhook_cert_secret_namespace;
  std::string webhook_cert_secret_name;
  std::vector<std::string> webhook_dns_names;  // with the Secret: the certificate's names
  std::string webhook_configuration;           // MutatingWebhookConfiguration to set caBundle on
  std::chrono::milliseconds webhook_setup_timeout{120000};
  std::chrono::milliseconds webhook_ca_bundle_check_period{60000};  // re-sets a removed caBundle
  OperatorSettings settings;
};

struct HostPort {
  std::string host;
  int port = 0;
};

// "HOST:PORT" or "[IPV6]:PORT" with PORT in [0, 65535]; the error names `flag`.
StatusOr<HostPort> SplitHostPort(const std::string& flag, const std::string& value);

// Parses argv (without argv[0]); main handles --help before this.
StatusOr<OperatorOptions> ParseOperatorFlags(const std::vector<std::string>& args);

std::string OperatorUsage();

}  // namespace korovod::k8s_operator
