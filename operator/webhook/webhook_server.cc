#include "operator/webhook/webhook_server.h"

#include <httplib.h>

#include <exception>

#include "operator/webhook/connection_guard.h"
#include "operator/webhook/serving_certificate.h"
#include "operator/webhook/sidecar_injector.h"
#include "common/http/http_listener.h"

namespace korovod::k8s_operator {

struct WebhookServer::Impl {
  WebhookServerOptions options;
  std::unique_ptr<ServingCertificate> certificate;
  std::unique_ptr<ConnectionGuard> guard;  // outlives the server's task queue
  std::unique_ptr<httplib::SSLServer> server;
  std::unique_ptr<http::HttpListener> listener;  // declared last: stops first
};

WebhookServer::WebhookServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WebhookServer::~WebhookServer() { Stop(); }

StatusOr<std::unique_ptr<WebhookServer>> WebhookServer::Start(WebhookServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl* s = impl.get();
  KV_ASSIGN_OR_RETURN(s->certificate,
                      ServingCertificate::Load(s->options.cert_dir, s->options.log));
  ServingCertificate* cert = s->certificate.get();
  s->guard = std::make_unique<ConnectionGuard>(s->options.limits, s->options.log);
  ConnectionGuard* guard = s->guard.get();
  s->server = std::make_unique<httplib::SSLServer>([cert, guard](SSL_CTX& ctx) {
    // TLS 1.2+ only (the API server speaks 1.3); the certificate is chosen per handshake so a
    // rotation applies to the next connection.
    SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
    SSL_CTX_set_cert_cb(&ctx, &ServingCertificate::OnHandshake, cert);
    guard->InstallOn(ctx);
    return true;
  });
  if (!s->server->is_valid()) return Internal("webhook server: cannot create a TLS context");
  httplib::SSLServer& srv = *s->server;
  srv.new_task_queue = [guard] { return guard->NewTaskQueue(); };
  // Called once a request has been read and answered (errors included): the connection's next
  // request gets a fresh deadline.
  srv.set_post_routing_handler(
      [guard](const httplib::Request&, httplib::Response&) { guard->RequestRead(); });
  srv.set_read_timeout(10, 0);
  srv.set_write_timeout(10, 0);
  srv.set_payload_max_length(s->options.max_body_bytes);
  // The API server keeps its connection alive; a rotated certificate applies at the next
  // handshake, so bound a connection's life: 5 requests, or 5 s idle.
  srv.set_keep_alive_max_count(5);
  srv.set_keep_alive_timeout(5);

  srv.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });
  srv.Post("/inject", [s](const httplib::Request& req, httplib::Response& res) {
    std::string_view outcome = "error";
    try {
      AdmissionReply reply = ReviewPodCreation(req.body, s->options.settings);
      res.status = reply.http_status;
      res.set_content(reply.body.dump(), "application/json");
      outcome = reply.outcome;
      if (s->options.log) s->options.log(reply.log);
    } catch (const std::exception& e) {
      // Never expected (ReviewPodCreation validates its input); answer, log, keep serving.
      res.status = 500;
      res.set_content(nlohmann::json{{"error", std::string("internal: ") + e.what()}}.dump(),
                      "application/json");
      if (s->options.log) s->options.log(std::string("internal error: ") + e.what());
    }
    if (s->options.on_review) s->options.on_review(outcome);
  });
  // cpp-httplib calls this for every status >= 400, our own 400s included: keep their bodies.
  srv.set_error_handler([s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string why = "HTTP " + std::to_string(res.status);
    if (res.status == 413) {
      why = "body over " + std::to_string(s->options.max_body_bytes) + " bytes";
      if (s->options.on_review) s->options.on_review("error");
    } else if (res.status == 404) {
      why = "no such path " + req.path + " (the webhook is POST /inject)";
    }
    res.set_content(nlohmann::json{{"error", why}}.dump(), "application/json");
  });

  KV_ASSIGN_OR_RETURN(s->listener, http::HttpListener::Start(srv, s->options.host, s->options.port,
                                                             "webhook server"));
  return std::make_unique<WebhookServer>(std::move(impl));
}

int WebhookServer::port() const { return impl_->listener->port(); }

std::string WebhookServer::address() const { return impl_->listener->address(); }

void WebhookServer::Stop() { impl_->listener->Stop(); }

}  // namespace korovod::k8s_operator
