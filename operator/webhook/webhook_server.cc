#include "operator/webhook/webhook_server.h"

#include <httplib.h>

#include <cstdlib>
#include <exception>
#include <optional>

#include "common/http/http_listener.h"
#include "operator/webhook/connection_guard.h"
#include "operator/webhook/serving_certificate.h"
#include "operator/webhook/sidecar_injector.h"

namespace korovod::k8s_operator {

struct WebhookServer::Impl {
  WebhookServerOptions options;
  std::unique_ptr<ServingCertificate> certificate;
  std::unique_ptr<ConnectionGuard> guard;  // outlives the server's task queue
  std::unique_ptr<BodyBudget> budget;
  std::unique_ptr<httplib::SSLServer> server;
  std::unique_ptr<http::HttpListener> listener;  // declared last: stops first
};

namespace {

void SetError(httplib::Response& res, int status, const std::string& why) {
  res.status = status;
  res.set_content(nlohmann::json{{"error", why}}.dump(), "application/json");
}

// The body of a POST /inject, read only once its declared length fits the body limit and the
// budget of bodies in flight (held while the review is parsed and answered: the caller's
// `reservation`); nullopt with `res` set (413, 503, 400) otherwise.
std::optional<std::string> ReadBudgetedBody(WebhookServer::Impl& s, const httplib::Request& req,
                                            httplib::Response& res,
                                            const httplib::ContentReader& read,
                                            std::optional<BodyBudget::Reservation>* reservation) {
  const size_t limit = s.options.max_body_bytes;
  size_t declared = limit;  // chunked: the most it may grow to
  if (req.has_header("Content-Length")) {
    const std::string text = req.get_header_value("Content-Length");
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || end == nullptr || *end != '\0') {
      SetError(res, 400, "Content-Length is not a number: " + text);
      return std::nullopt;
    }
    if (n > limit) {
      // httplib skips (reads and drops) a body over its payload limit, so the client, still
      // writing, gets the answer rather than a reset.
      read([](const char*, size_t) { return true; });
      res.status = 413;  // the error handler says why
      return std::nullopt;
    }
    declared = static_cast<size_t>(n);
  }
  if (auto held = s.budget->TryReserve(req.remote_addr, declared)) {
    reservation->emplace(std::move(*held));
  } else {
    res.set_header("Retry-After", "1");
    const std::string why = "review bodies in flight would exceed the webhook's memory budget (" +
                            std::to_string(s.budget->limits().total_bytes) + " bytes, " +
                            std::to_string(s.budget->limits().per_source_bytes) +
                            " per address): " + std::to_string(declared) + " more from " +
                            req.remote_addr;
    SetError(res, 503, why);
    if (s.options.log) s.options.log("refused a review: " + why);
    return std::nullopt;
  }
  std::string body;
  body.reserve(declared);
  const bool whole = read([&](const char* data, size_t n) {
    if (n > declared - body.size()) return false;  // longer than it said
    body.append(data, n);
    return true;
  });
  if (!whole) {
    if (res.status != 413) SetError(res, 400, "the body was cut short or overran its length");
    return std::nullopt;
  }
  return body;
}

}  // namespace

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
  s->budget = std::make_unique<BodyBudget>(s->options.body_budget);
  srv.Post("/inject", [s](const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& read) {
    std::optional<BodyBudget::Reservation> reservation;  // until the reply is built
    std::optional<std::string> body = ReadBudgetedBody(*s, req, res, read, &reservation);
    if (!body) {
      if (s->options.on_review) s->options.on_review("error");
      return;
    }
    std::string_view outcome = "error";
    try {
      AdmissionReply reply = ReviewPodCreation(*body, s->options.settings);
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
