// WebhookServer: the sidecar injection webhook over HTTPS. POST /inject takes an
// admission.k8s.io/v1 AdmissionReview and answers ReviewPodCreation's reply; the certificate
// comes from ServingCertificate and is re-read on rotation. Every replica of the operator serves
// it, leader or not: admission must not wait for an election.
//
//   POST /inject   200 AdmissionReview (allowed + JSON Patch, allowed unchanged, or denied)
//                  400 {"error": ...} for a body that is not an AdmissionReview
//                  413 for a body over max_body_bytes
//                  503 when its body would exceed the memory budget of bodies in flight
//   GET  /healthz  200 "ok"
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/controller/operator_settings.h"
#include "operator/webhook/body_budget.h"
#include "operator/webhook/connection_guard.h"

namespace korovod::k8s_operator {

struct WebhookServerOptions {
  std::string host = "0.0.0.0";
  int port = 9443;            // 0: ephemeral (tests)
  std::string cert_dir;       // tls.crt + tls.key
  OperatorSettings settings;  // sidecar image, ports, cluster domain
  // The API server refuses request bodies over 3 MiB (its MaxRequestBodyBytes), so the pod in a
  // CREATE review came in at most 3 MiB; re-encoded as JSON (a protobuf or YAML body grows) and
  // wrapped with userInfo and options it stays well under 4 MiB. Anything larger is not from
  // the API server. (The webhook is registered for Pod CREATE only: no oldObject.)
  size_t max_body_bytes = 4u << 20;
  ConnectionLimits limits;       // slow clients and floods: connection_guard.h
  BodyBudgetLimits body_budget;  // bodies in flight: body_budget.h
  // One line per review (what was decided and why) and per certificate reload; without a prefix
  // (the caller's logger adds time, role and subsystem).
  std::function<void(const std::string&)> log;
  // Per review: "injected", "unchanged", "denied" or "error" (for metrics). May be null.
  std::function<void(std::string_view outcome)> on_review;
};

class WebhookServer {
 public:
  // Loads the certificate (a missing or bad one fails, naming the file) and starts listening.
  static StatusOr<std::unique_ptr<WebhookServer>> Start(WebhookServerOptions options);
  ~WebhookServer();
  WebhookServer(const WebhookServer&) = delete;
  WebhookServer& operator=(const WebhookServer&) = delete;

  int port() const;
  std::string address() const;
  void Stop();  // idempotent

  struct Impl;
  explicit WebhookServer(std::unique_ptr<Impl> impl);  // use Start

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace korovod::k8s_operator
