#include "operator/manager/webhook_certificate_setup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/base64.h"
#include "operator/kube/api_result.h"
#include "operator/kube/resource.h"
#include "operator/manager/ca_bundle_keeper.h"
#include "operator/webhook/certificate_authority.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A lost race (another replica created or replaced the Secret, someone wrote the webhook
// configuration): retried at once, without waiting out the retry period.
Status Raced(const std::string& what) { return Aborted(what); }

json SecretObject(const WebhookCertificateSetupOptions& o, const WebhookCertificates& c) {
  json data = {{kCaCrtKey, Base64Encode(c.ca_crt)},
               {kCaKeyKey, Base64Encode(c.ca_key)},
               {kTlsCrtKey, Base64Encode(c.tls_crt)},
               {kTlsKeyKey, Base64Encode(c.tls_key)}};
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", o.secret_name},
            {"namespace", o.secret_namespace},
            {"labels",
             {{"app.kubernetes.io/managed-by", "korovod-operator"},
              {"app.kubernetes.io/component", "webhook-certificate"}}}}},
          {"type", "kubernetes.io/tls"},
          {"data", std::move(data)}};
}

StatusOr<WebhookCertificates> FromSecret(const json& secret) {
  const json data = secret.value("data", json::object());
  if (!data.is_object()) return InvalidArgument("no data");
  auto field = [&data](const char* key) -> StatusOr<std::string> {
    auto it = data.find(key);
    if (it == data.end() || !it->is_string()) return InvalidArgument(std::string("no ") + key);
    StatusOr<std::string> decoded = Base64Decode(it->get<std::string>());
    if (!decoded.ok()) return decoded.status().WithContext(key);
    return decoded;
  };
  WebhookCertificates c;
  KV_ASSIGN_OR_RETURN(c.ca_crt, field(kCaCrtKey));
  KV_ASSIGN_OR_RETURN(c.ca_key, field(kCaKeyKey));
  KV_ASSIGN_OR_RETURN(c.tls_crt, field(kTlsCrtKey));
  KV_ASSIGN_OR_RETURN(c.tls_key, field(kTlsKeyKey));
  return c;
}

// One pass over the Secret: the stored set when it may be served, else a new one written with a
// create (absent) or a resourceVersion-guarded replace (unusable).
StatusOr<WebhookCertificates> EnsureSecret(const kube::ApiClient& client,
                                           const WebhookCertificateSetupOptions& o) {
  const std::string path = kube::kSecrets.Path(o.secret_namespace, o.secret_name);
  const std::string where = "Secret " + o.secret_namespace + "/" + o.secret_name;
  kube::ApiResult got = client.Get(path);
  if (!got.ok() && !kube::IsNotFound(got)) return got.status();
  if (got.ok()) {
    StatusOr<WebhookCertificates> stored = FromSecret(got.value());
    Status usable = stored.status();
    if (usable.ok()) {
      usable = CheckWebhookCertificates(*stored, o.dns_names, std::time(nullptr), o.renew_before);
    }
    if (usable.ok()) {
      if (o.log) o.log("webhook certificate: using the CA in " + where);
      return stored;
    }
    if (o.log) o.log("webhook certificate: replacing " + where + ": " + usable.message());
  }
  KV_ASSIGN_OR_RETURN(WebhookCertificates fresh, IssueWebhookCertificates(o.dns_names, o.validity));
  json secret = SecretObject(o, fresh);
  if (got.ok()) {
    secret["metadata"]["resourceVersion"] =
        got->at("metadata").value("resourceVersion", std::string());
  }
  kube::ApiResult written = got.ok()
                                ? client.Replace(path, secret)
                                : client.Create(kube::kSecrets.Path(o.secret_namespace), secret);
  if (kube::IsAlreadyExists(written) || kube::IsConflict(written)) {
    return Raced(where + " written meanwhile (another replica): reading it again");
  }
  if (!written.ok()) return written.status();
  if (o.log) o.log("webhook certificate: new CA stored in " + where);
  return fresh;
}

// Writes `content` to dir/name through a temporary file and a rename, so the webhook never reads
// half a file.
Status WriteFileAtomically(const std::string& dir, const std::string& name,
                           const std::string& content, mode_t mode) {
  const std::string tmp = dir + "/." + name + ".tmp";
  const std::string path = dir + "/" + name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(StatusCode::kFailedPrecondition, "creating " + tmp, errno);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(StatusCode::kFailedPrecondition, "writing " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    return ErrnoStatus(StatusCode::kFailedPrecondition, "closing " + tmp, errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(StatusCode::kFailedPrecondition, "renaming " + tmp + " to " + path, errno);
  }
  return OkStatus();
}

// Runs `step` until it succeeds or the deadline passes; a lost race retries at once, anything
// else after the retry period (doubling, at most 8 times it). The error names the step and its
// last failure.
Status RetryUntil(const std::string& step, Clock::time_point deadline,
                  const WebhookCertificateSetupOptions& o, const std::function<Status()>& fn) {
  std::chrono::milliseconds wait = o.retry_period;
  for (int attempt = 1;; ++attempt) {
    Status s = fn();
    if (s.ok()) return s;
    const auto now = Clock::now();
    if (now >= deadline) {
      return DeadlineExceeded(step + ": not done after " + std::to_string(attempt) +
                              " attempts in " + std::to_string(o.timeout.count()) +
                              " ms; last error: " + s.ToString());
    }
    if (s.code() == StatusCode::kAborted) continue;
    if (o.log) {
      o.log(step + " (attempt " + std::to_string(attempt) + ", retrying): " + s.ToString());
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(wait, deadline - now));
    wait = std::min(wait * 2, o.retry_period * 8);
  }
}

}  // namespace

StatusOr<WebhookCertificates> ReadCertificateSecret(const kube::ApiClient& client,
                                                    const std::string& secret_namespace,
                                                    const std::string& secret_name) {
  const std::string where = "Secret " + secret_namespace + "/" + secret_name;
  kube::ApiResult got = client.Get(kube::kSecrets.Path(secret_namespace, secret_name));
  if (kube::IsNotFound(got)) return FailedPrecondition(where + " does not exist");
  if (!got.ok()) return got.status().WithContext(where);
  StatusOr<WebhookCertificates> certs = FromSecret(got.value());
  if (!certs.ok()) return certs.status().WithContext(where);
  return certs;
}

Status WriteServingPair(const std::string& cert_dir, const WebhookCertificates& certs) {
  // The key first: ServingCertificate keeps its pair until a matching one is complete.
  KV_RETURN_IF_ERROR(WriteFileAtomically(cert_dir, kTlsKeyKey, certs.tls_key, 0600));
  return WriteFileAtomically(cert_dir, kTlsCrtKey, certs.tls_crt, 0644);
}

StatusOr<std::string> SetUpWebhookCertificate(const kube::ApiClient& client,
                                              const WebhookCertificateSetupOptions& options) {
  if (options.secret_name.empty() || options.secret_namespace.empty()) {
    return InvalidArgument("webhook certificate: no Secret namespace/name");
  }
  if (options.dns_names.empty()) return InvalidArgument("webhook certificate: no DNS names");
  const auto deadline = Clock::now() + options.timeout;
  WebhookCertificates certs;
  KV_RETURN_IF_ERROR(RetryUntil(
      "webhook certificate Secret " + options.secret_namespace + "/" + options.secret_name,
      deadline, options, [&]() -> Status {
        KV_ASSIGN_OR_RETURN(certs, EnsureSecret(client, options));
        return OkStatus();
      }));
  KV_RETURN_IF_ERROR(WriteServingPair(options.cert_dir, certs));
  if (!options.webhook_configuration.empty()) {
    // Added to the CAs already there, not in their place: during a rotation the replicas that
    // still serve a certificate of the previous CA stay trusted until their keepers switch them
    // to the new one (CaBundleKeeper retires the old CA after that).
    KV_RETURN_IF_ERROR(
        RetryUntil("caBundle of MutatingWebhookConfiguration " + options.webhook_configuration,
                   deadline, options, [&] {
                     return EnsureCaBundle(client, options.webhook_configuration, certs.ca_crt,
                                           /*retire_others=*/false);
                   }));
    if (options.log) {
      options.log("webhook certificate: caBundle of MutatingWebhookConfiguration " +
                  options.webhook_configuration + " set");
    }
  }
  return certs.ca_crt;
}

}  // namespace korovod::k8s_operator
