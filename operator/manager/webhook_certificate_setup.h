// The operator owns its webhook's serving certificate (--webhook-cert-secret): before serving, it
// reads the CA and serving certificate from a Secret in its namespace, creating them (or replacing
// a set that is invalid, names other hosts or expires soon) when needed, writes tls.crt/tls.key
// into the webhook's certificate directory, and sets caBundle on every webhook of its
// MutatingWebhookConfiguration. Nothing is generated when the chart renders, so a
// `helm template | kubectl apply` or a GitOps sync cannot rotate the CA; replicas starting
// together agree on one Secret (create-or-adopt on AlreadyExists, resourceVersion-guarded
// replace), and a restart reuses it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/kube/api_client.h"
#include "operator/webhook/certificate_authority.h"

namespace korovod::k8s_operator {

struct WebhookCertificateSetupOptions {
  std::string secret_namespace;
  std::string secret_name;
  // The MutatingWebhookConfiguration whose caBundle is set; "" = none (a test or an external
  // injector).
  std::string webhook_configuration;
  std::vector<std::string> dns_names;  // the serving certificate's names; the first is its CN
  std::string cert_dir;                // tls.crt and tls.key are written here
  std::chrono::seconds validity{std::chrono::hours(24 * 3650)};
  // A stored set with less than this left (CA or leaf) is replaced at start.
  std::chrono::seconds renew_before{std::chrono::hours(24 * 90)};
  // The whole setup's deadline: the Secret, the files and the caBundle (the webhook
  // configuration may be created after the Deployment, e.g. by a GitOps sync).
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  std::chrono::milliseconds retry_period{std::chrono::seconds(1)};
  std::function<void(const std::string&)> log;  // may be null
};

// The certificates stored in the Secret (FailedPrecondition when it is absent; InvalidArgument
// naming the field that is missing or not base64). Also read by CaBundleKeeper every period: the
// Secret, not what a replica loaded at its start, says which CA is current.
StatusOr<WebhookCertificates> ReadCertificateSecret(const kube::ApiClient& client,
                                                    const std::string& secret_namespace,
                                                    const std::string& secret_name);

// Writes tls.crt and tls.key into `cert_dir`, each through a temporary file and a rename.
Status WriteServingPair(const std::string& cert_dir, const WebhookCertificates& certs);

// Returns the CA certificate (PEM) the caBundle now holds, or why the setup did not finish before
// the deadline (the last error of the step that was retried).
StatusOr<std::string> SetUpWebhookCertificate(const kube::ApiClient& client,
                                              const WebhookCertificateSetupOptions& options);

}  // namespace korovod::k8s_operator
