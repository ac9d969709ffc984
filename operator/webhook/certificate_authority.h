// The webhook's own certificate authority: a self-signed CA and a serving certificate it signs,
// as PEM, and the check that decides whether a stored pair may still be served. The operator keeps
// them in a Secret (manager/webhook_certificate_setup.h) so that rendering the Helm chart carries
// no key material and a `helm template | kubectl apply` never rotates the caBundle. Pure OpenSSL:
// no I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace korovod::k8s_operator {

// PEM text of each part; the data keys of the Secret that holds them.
struct WebhookCertificates {
  std::string ca_crt;
  std::string ca_key;
  std::string tls_crt;
  std::string tls_key;
};

inline constexpr char kCaCrtKey[] = "ca.crt";
inline constexpr char kCaKeyKey[] = "ca.key";
inline constexpr char kTlsCrtKey[] = "tls.crt";
inline constexpr char kTlsKeyKey[] = "tls.key";

// A new P-256 CA ("korovod-webhook-ca") and a serving certificate for `dns_names` (the first is
// the subject CN; server auth only), both valid from now - 1 h (clock skew) for `validity`.
StatusOr<WebhookCertificates> IssueWebhookCertificates(const std::vector<std::string>& dns_names,
                                                       std::chrono::seconds validity);

// OK when the set may be served: every part parses, each key matches its certificate, ca.crt is a
// CA, tls.crt is signed by it and names every one of `dns_names`, and both stay valid for at
// least `min_remaining` after `now_unix`. Otherwise the first reason found.
Status CheckWebhookCertificates(const WebhookCertificates& certs,
                                const std::vector<std::string>& dns_names, int64_t now_unix,
                                std::chrono::seconds min_remaining);

}  // namespace korovod::k8s_operator
