#include "operator/kube/api_client.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <mutex>
#include <vector>

#include "common/json_read.h"
#include "operator/kube/query.h"
#include "operator/kube/rate_limiter.h"
#include "operator/kube/token_source.h"

namespace korovod::kube {
namespace {

struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

std::string OpenSslError() {
  const unsigned long err = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  if (err == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(err, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in a PEM bundle.
StatusOr<std::vector<X509Ptr>> ParseCerts(const std::string& pem, const std::string& what) {
  BioPtr bio = MemBio(pem);
  std::vector<X509Ptr> certs;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the loop ends on a "no start line" error at the end of the bundle
  if (certs.empty()) return InvalidArgument(what + ": no PEM certificate found");
  return certs;
}

struct ServerUrl {
  bool https = true;
  std::string host;
  int port = 443;
  std::string base_path;  // kept as a prefix of every request path (proxies such as Rancher)
};

StatusOr<ServerUrl> ParseServer(const std::string& server) {
  ServerUrl url;
  std::string rest;
  if (server.rfind("https://", 0) == 0) {
    rest = server.substr(8);
  } else if (server.rfind("http://", 0) == 0) {
    url.https = false;
    url.port = 80;
    rest = server.substr(7);
  } else {
    return InvalidArgument("server URL \"" + server + "\": must start with https:// or http://");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) url.base_path = rest.substr(slash);
  while (!url.base_path.empty() && url.base_path.back() == '/') url.base_path.pop_back();
  size_t colon = authority.rfind(':');
  if (!authority.empty() && authority[0] == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos)
      return InvalidArgument("server URL \"" + server + "\": bad IPv6");
    url.host = authority.substr(1, close - 1);
    colon = authority.find(':', close);
  } else {
    url.host = authority.substr(0, colon);
  }
  if (colon != std::string::npos) {
    try {
      url.port = std::stoi(authority.substr(colon + 1));
    } catch (const std::exception&) {
      return InvalidArgument("server URL \"" + server + "\": bad port");
    }
  }
  if (url.host.empty()) return InvalidArgument("server URL \"" + server + "\": no host");
  return url;
}

const char* PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategic:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kApply:
      return "application/apply-patch+yaml";  // JSON is YAML
  }
  return "application/merge-patch+json";
}

// A request that may be sent twice without changing the outcome: sent again once when a kept-alive
// connection turns out closed by the server (its idle timeout raced our send). A POST is not
// (its retry would meet AlreadyExists for a create that did happen, or post an Event twice);
// PUT and PATCH are left to their callers, which re-read and decide (a stale PUT is a 409).
bool RetriableOnStaleConnection(const std::string& method) {
  return method == "GET" || method == "DELETE";
}

// The transport failures a connection closed under us produces; a timeout is not one of them
// (told apart by the time it took: see Impl::Do).
bool ConnectionLost(httplib::Error error) {
  return error == httplib::Error::Read || error == httplib::Error::Write ||
         error == httplib::Error::SSLConnection || error == httplib::Error::Connection;
}

StatusCode TransportCode(httplib::Error error) {
  switch (error) {
    case httplib::Error::Canceled:
      return StatusCode::kAborted;
    case httplib::Error::SSLServerVerification:
    case httplib::Error::SSLLoadingCerts:
      return StatusCode::kPermissionDenied;
    default:
      return StatusCode::kUnavailable;
  }
}

}  // namespace

struct ApiClient::Impl {
  KubeConfig config;
  ApiClientOptions options;
  ServerUrl url;
  std::vector<X509Ptr> ca_certs;
  X509Ptr client_cert;
  PkeyPtr client_key;
  mutable TokenSource tokens;
  mutable TokenBucket limiter;
  // Idle kept-alive connections; a request takes one (or opens one) and gives it back after.
  mutable std::mutex pool_mu;
  mutable std::vector<std::unique_ptr<httplib::ClientImpl>> idle;

  Impl(KubeConfig c, ApiClientOptions o, ServerUrl u)
      : config(std::move(c)),
        options(std::move(o)),
        url(std::move(u)),
        tokens(config.token, config.token_file),
        limiter(options.qps, options.burst) {}

  std::string Where(const std::string& method, const std::string& path) const {
    return method + " " + config.server + path;
  }

  // A new httplib client (it connects on its first request). Each is used by one thread at a
  // time: that, not a lock around it, is what makes ApiClient thread-safe.
  StatusOr<std::unique_ptr<httplib::ClientImpl>> NewClient(const std::string& what,
                                                           bool keep_alive) const {
    std::unique_ptr<httplib::ClientImpl> cli;
    if (url.https) {
      auto ssl = client_cert ? std::make_unique<httplib::SSLClient>(
                                   url.host, url.port, client_cert.get(), client_key.get())
                             : std::make_unique<httplib::SSLClient>(url.host, url.port);
      if (!ssl->is_valid()) {
        return InvalidArgument(what + ": TLS set-up failed (client certificate/key mismatch?)");
      }
      if (!ca_certs.empty()) {
        X509_STORE* store = X509_STORE_new();  // owned by the SSL_CTX once set
        for (const X509Ptr& cert : ca_certs) X509_STORE_add_cert(store, cert.get());
        ssl->set_ca_cert_store(store);
      }
      ssl->enable_server_certificate_verification(!config.insecure_skip_tls_verify);
      cli = std::move(ssl);
    } else {
      cli = std::make_unique<httplib::ClientImpl>(url.host, url.port);
    }
    const auto ms = options.timeout.count();
    cli->set_read_timeout(ms / 1000, (ms % 1000) * 1000);
    cli->set_write_timeout(ms / 1000, (ms % 1000) * 1000);
    const auto cms = options.connect_timeout.count();
    cli->set_connection_timeout(cms / 1000, (cms % 1000) * 1000);
    cli->set_url_encode(false);  // paths and queries are encoded already (Query)
    cli->set_keep_alive(keep_alive);
    // A request goes out as headers then body: with Nagle on a kept-alive connection the body
    // waits for the server's delayed ACK of the headers (40 ms on Linux) on every write request.
    // Go's net/http (client-go) sets TCP_NODELAY too.
    cli->set_tcp_nodelay(true);
    return cli;
  }

  StatusOr<std::unique_ptr<httplib::ClientImpl>> Acquire(const std::string& what) const {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      if (!idle.empty()) {
        std::unique_ptr<httplib::ClientImpl> cli = std::move(idle.back());
        idle.pop_back();
        return cli;
      }
    }
    return NewClient(what, options.max_idle_connections > 0);
  }

  // Back to the pool when it has room and the connection is still open (a failure or the
  // server's "Connection: close" has closed it); else it closes here.
  void Release(std::unique_ptr<httplib::ClientImpl> cli) const {
    if (!cli->is_socket_open()) return;
    std::lock_guard<std::mutex> lock(pool_mu);
    if (static_cast<int>(idle.size()) < options.max_idle_connections) {
      idle.push_back(std::move(cli));
    }
  }

  StatusOr<httplib::Headers> Headers(const std::string& what) const {
    httplib::Headers headers{{"Accept", "application/json"}, {"User-Agent", options.user_agent}};
    auto token = tokens.Token();
    if (!token.ok()) return token.status().WithContext(what);
    if (!token.value().empty()) headers.emplace("Authorization", "Bearer " + token.value());
    return headers;
  }

  ApiResult TransportError(const std::string& what, httplib::Error error,
                           const httplib::ClientImpl& cli) const {
    std::string text = what + ": " + httplib::to_string(error);
    if (error == httplib::Error::SSLServerVerification && url.https) {
      const long verify =  // NOLINT(runtime/int): OpenSSL's type
          static_cast<const httplib::SSLClient&>(cli).get_openssl_verify_result();
      text += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
    }
    return ApiResult(Status(TransportCode(error), text));
  }

  ApiResult Do(const std::string& method, const std::string& path, const std::string& body,
               const std::string& content_type) const {
    const std::string what = Where(method, path);
    const std::chrono::nanoseconds waited = limiter.Wait();
    if (options.on_rate_limit_wait) options.on_rate_limit_wait(waited);
    auto headers = Headers(what);
    if (!headers.ok()) return ApiResult(headers.status());
    httplib::Request req;
    req.method = method;
    req.path = url.base_path + path;
    req.headers = std::move(headers).value();
    if (!content_type.empty()) {
      req.headers.emplace("Content-Type", content_type);
      req.body = body;
    }
    auto cli = Acquire(what);
    if (!cli.ok()) return ApiResult(cli.status());
    if (method != "GET" && options.write_fence) {
      if (Status fenced = options.write_fence(); !fenced.ok()) {
        Release(std::move(cli).value());
        return ApiResult(fenced.WithContext(what));
      }
    }
    const bool reused = cli.value()->is_socket_open() != 0;
    const auto sent = std::chrono::steady_clock::now();
    httplib::Result res = cli.value()->send(req);
    if (!res && reused && ConnectionLost(res.error()) && RetriableOnStaleConnection(method) &&
        std::chrono::steady_clock::now() - sent < options.timeout) {
      // The server closed the idle connection as we sent on it (not a timeout: that takes
      // options.timeout). Once more on a new connection; its failure is the answer.
      cli = NewClient(what, options.max_idle_connections > 0);
      if (!cli.ok()) return ApiResult(cli.status());
      res = cli.value()->send(req);
    }
    if (res) {
      Release(std::move(cli).value());
    } else {
      return TransportError(what, res.error(), *cli.value());
    }
    if (res->status < 200 || res->status >= 300) {
      return ApiErrorFromResponse(what, res->status, res->body);
    }
    nlohmann::json json = nlohmann::json::parse(res->body, nullptr, false);
    if (json.is_discarded()) {
      return ApiResult(Internal(what + ": HTTP " + std::to_string(res->status) +
                                " response is not JSON: " + res->body.substr(0, 128)));
    }
    return json;
  }
};

ApiClient::ApiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiClient::~ApiClient() = default;

StatusOr<std::unique_ptr<ApiClient>> ApiClient::FromConfig(KubeConfig config,
                                                           ApiClientOptions options) {
  KV_ASSIGN_OR_RETURN(ServerUrl url, ParseServer(config.server));
  auto impl = std::make_unique<Impl>(std::move(config), std::move(options), std::move(url));
  const KubeConfig& c = impl->config;
  if (!c.ca_pem.empty()) {
    KV_ASSIGN_OR_RETURN(impl->ca_certs, ParseCerts(c.ca_pem, c.server + ": CA"));
  }
  if (!c.client_cert_pem.empty()) {
    KV_ASSIGN_OR_RETURN(auto certs, ParseCerts(c.client_cert_pem, c.server + ": client cert"));
    impl->client_cert = std::move(certs.front());
    BioPtr bio = MemBio(c.client_key_pem);
    impl->client_key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    if (!impl->client_key) {
      return InvalidArgument(c.server + ": client key: " + OpenSslError());
    }
    if (X509_check_private_key(impl->client_cert.get(), impl->client_key.get()) != 1) {
      ERR_clear_error();
      return InvalidArgument(c.server + ": client key does not match the client certificate");
    }
  }
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(impl)));  // private constructor
}

const KubeConfig& ApiClient::config() const { return impl_->config; }

ApiResult ApiClient::Get(const std::string& path) const { return impl_->Do("GET", path, "", ""); }

ApiResult ApiClient::List(const std::string& path, const ListOptions& options) const {
  nlohmann::json items = nlohmann::json::array();
  nlohmann::json last;
  std::string continue_token;
  do {
    Query query;
    query.Add("labelSelector", options.label_selector)
        .Add("fieldSelector", options.field_selector)
        .Add("limit", options.page_size > 0 ? std::to_string(options.page_size) : "")
        .Add("continue", continue_token);
    // resourceVersion may not be combined with continue: the token pins the snapshot.
    if (continue_token.empty()) query.Add("resourceVersion", options.resource_version);
    ApiResult page = Get(query.AppendTo(path));
    if (!page.ok()) return page;
    last = std::move(page).value();
    if (!last.is_object()) {
      return ApiResult(Internal(impl_->Where("GET", path) + ": a list response not an object"));
    }
    // An empty list may come as "items": null.
    if (last.contains("items") && last["items"].is_array()) {
      for (auto& item : last["items"]) {
        if (options.transform) options.transform(item);
        items.push_back(std::move(item));
      }
      last["items"] = nullptr;  // the page's whole objects go now, not with the next page
    }
    continue_token = StringAt(last, {"metadata", "continue"});
  } while (!continue_token.empty());
  nlohmann::json merged = {
      {"kind", StringAt(last, {"kind"}, "List")},
      {"apiVersion", StringAt(last, {"apiVersion"}, "v1")},
      {"metadata", {{"resourceVersion", StringAt(last, {"metadata", "resourceVersion"})}}},
      {"items", std::move(items)},
  };
  return merged;
}

ApiResult ApiClient::Create(const std::string& path, const nlohmann::json& object) const {
  return impl_->Do("POST", path, object.dump(), "application/json");
}

ApiResult ApiClient::Replace(const std::string& path, const nlohmann::json& object) const {
  return impl_->Do("PUT", path, object.dump(), "application/json");
}

ApiResult ApiClient::Patch(const std::string& path, const nlohmann::json& body,
                           const PatchOptions& options) const {
  std::string target = path;
  if (options.type == PatchType::kApply) {
    if (options.field_manager.empty()) {
      return ApiResult(InvalidArgument(impl_->Where("PATCH", path) +
                                       ": server-side apply needs a field manager"));
    }
    target = Query()
                 .Add("fieldManager", options.field_manager)
                 .Add("force", options.force ? "true" : "")
                 .AppendTo(path);
  } else if (!options.field_manager.empty()) {
    target = Query().Add("fieldManager", options.field_manager).AppendTo(path);
  }
  return impl_->Do("PATCH", target, body.dump(), PatchContentType(options.type));
}

ApiResult ApiClient::Delete(const std::string& path, const DeleteOptions& options) const {
  nlohmann::json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
  if (!options.precondition_uid.empty()) body["preconditions"]["uid"] = options.precondition_uid;
  if (!options.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = options.precondition_resource_version;
  }
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  return impl_->Do("DELETE", path, body.dump(), "application/json");
}

ApiResult ApiClient::Stream(const std::string& path, const ChunkReceiver& receiver,
                            std::chrono::milliseconds read_timeout, Canceller* canceller) const {
  const std::string what = impl_->Where("GET", path);
  auto cli_or = impl_->NewClient(what, /*keep_alive=*/false);
  if (!cli_or.ok()) return ApiResult(cli_or.status());
  std::unique_ptr<httplib::ClientImpl> cli = std::move(cli_or).value();
  auto headers = impl_->Headers(what);
  if (!headers.ok()) return ApiResult(headers.status());
  const auto ms = read_timeout.count();
  cli->set_read_timeout(ms / 1000, (ms % 1000) * 1000);

  // The hook must be removed before `cli` dies; this guard runs first on every return.
  struct HookGuard {
    Canceller* c;
    ~HookGuard() {
      if (c) c->SetHook(nullptr);
    }
  } guard{canceller};
  if (canceller && !canceller->SetHook([raw = cli.get()] { raw->stop(); })) {
    return ApiResult(Status(StatusCode::kAborted, what + ": cancelled"));
  }

  int code = 0;
  std::string error_body;
  bool receiver_stopped = false;
  httplib::Result res = cli->Get(
      impl_->url.base_path + path, headers.value(),
      [&](const httplib::Response& r) {
        code = r.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (code < 200 || code >= 300) {
          if (error_body.size() < 64 * 1024) error_body.append(data, n);
          return true;
        }
        if (canceller && canceller->cancelled()) return false;
        if (!receiver(std::string_view(data, n))) {
          receiver_stopped = true;
          return false;
        }
        return true;
      });
  if (code != 0 && (code < 200 || code >= 300)) {
    return ApiErrorFromResponse(what, code, error_body);
  }
  if (canceller && canceller->cancelled()) {
    return ApiResult(Status(StatusCode::kAborted, what + ": cancelled"));
  }
  if (receiver_stopped) return nlohmann::json();
  if (!res) return impl_->TransportError(what, res.error(), *cli);
  return nlohmann::json();
}

}  // namespace korovod::kube
