#include "operator/manager/ca_bundle_keeper.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/base64.h"
#include "operator/kube/api_result.h"
#include "operator/kube/resource.h"
#include "operator/webhook/certificate_authority.h"

namespace korovod::k8s_operator {
namespace {

const kube::ResourceRef kMutatingWebhookConfigurations{"admissionregistration.k8s.io", "v1",
                                                       "mutatingwebhookconfigurations", false};

}  // namespace

namespace {

// A certificate's identity in a bundle: its base64 body without blank space, so that line
// lengths and endings never make two copies of one CA differ.
std::string PemKey(std::string_view block) {
  std::string key;
  for (char c : block) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') key += c;
  }
  return key;
}

std::vector<std::string> Keys(const std::vector<std::string>& blocks) {
  std::vector<std::string> keys;
  for (const std::string& b : blocks) keys.push_back(PemKey(b));
  return keys;
}

}  // namespace

std::vector<std::string> SplitPemBundle(std::string_view bundle) {
  static constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  static constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  std::vector<std::string> out;
  std::vector<std::string> keys;
  size_t at = 0;
  while ((at = bundle.find(kBegin, at)) != std::string_view::npos) {
    const size_t end = bundle.find(kEnd, at);
    if (end == std::string_view::npos) break;
    std::string block;
    for (char c : bundle.substr(at, end + kEnd.size() - at)) {
      if (c != '\r') block += c;
    }
    block += '\n';
    std::string key = PemKey(block);
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      keys.push_back(std::move(key));
      out.push_back(std::move(block));
    }
    at = end + kEnd.size();
  }
  return out;
}

bool SameCertificates(std::string_view a, std::string_view b) {
  return Keys(SplitPemBundle(a)) == Keys(SplitPemBundle(b));
}

namespace {

// `ca_pem` first, then the other CAs of `current` (unless retired), each once, as one bundle.
std::string MergedBundle(const std::string& current_b64, const std::string& ca_pem,
                         bool retire_others) {
  std::string all = ca_pem + "\n";
  if (!retire_others) {
    StatusOr<std::string> current = Base64Decode(current_b64);
    if (current.ok()) all += *current;
  }
  std::string bundle;
  for (const std::string& ca : SplitPemBundle(all)) bundle += ca;  // deduplicated
  return bundle;
}

}  // namespace

Status EnsureCaBundle(const kube::ApiClient& client, const std::string& name,
                      const std::string& ca_pem, bool retire_others, bool* changed) {
  if (changed) *changed = false;
  const std::string what = "MutatingWebhookConfiguration " + name;
  if (SplitPemBundle(ca_pem).empty()) return InvalidArgument(what + ": the CA is not PEM");
  const std::string path = kMutatingWebhookConfigurations.Path("", name);
  kube::ApiResult got = client.Get(path);
  if (kube::IsNotFound(got)) return FailedPrecondition(what + " does not exist (yet)");
  if (!got.ok()) return got.status();
  nlohmann::json config = std::move(got).value();
  auto hooks = config.find("webhooks");
  if (hooks == config.end() || !hooks->is_array() || hooks->empty()) {
    return FailedPrecondition(what + " has no webhooks");
  }
  bool differs = false;
  for (nlohmann::json& hook : *hooks) {
    nlohmann::json& client_config = hook["clientConfig"];
    const std::string current = client_config.value("caBundle", std::string());
    StatusOr<std::string> decoded = Base64Decode(current);
    const std::string wanted = MergedBundle(current, ca_pem, retire_others);
    // Compared as certificates, not bytes: a bundle written by hand with other line endings
    // but the same CAs in the same order is left alone.
    if (!decoded.ok() || !SameCertificates(*decoded, wanted)) {
      client_config["caBundle"] = Base64Encode(wanted);
      differs = true;
    }
  }
  if (!differs) return OkStatus();
  // A PUT with the resourceVersion just read: a concurrent writer makes it fail, not vanish.
  kube::ApiResult put = client.Replace(path, config);
  if (kube::IsConflict(put)) return Aborted(what + " changed meanwhile");
  if (!put.ok()) return put.status();
  if (changed) *changed = true;
  return OkStatus();
}

CaBundleKeeper::CaBundleKeeper(const kube::ApiClient& client, CaBundleKeeperOptions options,
                               Log log)
    : client_(client),
      options_(std::move(options)),
      log_(std::move(log)),
      serving_ca_(options_.serving_ca_pem),
      serving_since_(std::chrono::steady_clock::now()),
      thread_([this] { Run(); }) {}

CaBundleKeeper::~CaBundleKeeper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status CaBundleKeeper::CheckOnce() {
  const WebhookCertificateSetupOptions& o = options_.setup;
  const std::string config = "MutatingWebhookConfiguration " + o.webhook_configuration;
  const std::string secret = "Secret " + o.secret_namespace + "/" + o.secret_name;
  StatusOr<WebhookCertificates> stored =
      ReadCertificateSecret(client_, o.secret_namespace, o.secret_name);
  Status usable = stored.status();
  if (usable.ok()) {
    // Any time left will do: a replica switches to whatever the Secret holds; replacing a
    // Secret near its end is the setup's job at the next start.
    usable =
        CheckWebhookCertificates(*stored, o.dns_names, std::time(nullptr), std::chrono::seconds(0));
  }
  bool changed = false;
  if (!usable.ok()) {
    // Absent (deleted to rotate, a new replica will create it) or unusable: keep this replica's
    // own CA in the caBundle, take nothing away.
    KV_RETURN_IF_ERROR(EnsureCaBundle(client_, o.webhook_configuration, serving_ca_,
                                      /*retire_others=*/false, &changed));
    if (log_ && changed) log_("caBundle of " + config + " was changed or removed: restored");
    return usable.WithContext(secret + " (kept this replica's CA in the caBundle)");
  }
  const auto now = std::chrono::steady_clock::now();
  if (!SameCertificates(stored->ca_crt, serving_ca_)) {
    // Rotated by another replica: trust first, then serve. The caBundle gets the new CA (the
    // old one stays), and only then does this replica present the new certificate.
    KV_RETURN_IF_ERROR(EnsureCaBundle(client_, o.webhook_configuration, stored->ca_crt,
                                      /*retire_others=*/false, &changed));
    KV_RETURN_IF_ERROR(WriteServingPair(o.cert_dir, *stored));
    serving_ca_ = stored->ca_crt;
    serving_since_ = now;
    if (log_) {
      log_("webhook certificate: " + secret + " holds a new CA (rotated): serving its " +
           "certificate now; the caBundle holds both CAs until the old one is retired");
    }
    return OkStatus();
  }
  const auto retire_after =
      options_.retire_after.count() > 0 ? options_.retire_after : 2 * options_.period;
  const bool retire = now - serving_since_ >= retire_after;
  KV_RETURN_IF_ERROR(
      EnsureCaBundle(client_, o.webhook_configuration, serving_ca_, retire, &changed));
  if (log_ && changed) {
    log_("caBundle of " + config +
         (retire ? ": set to the CA of " + secret + " alone" +
                       " (other CAs retired, or it had been removed)"
                 : " was changed or removed: restored"));
  }
  return OkStatus();
}

void CaBundleKeeper::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  std::string last_error;  // logged once until it changes, not every period
  while (!cv_.wait_for(lock, options_.period, [this] { return stop_; })) {
    lock.unlock();
    Status s = CheckOnce();
    if (log_ && !s.ok() && s.ToString() != last_error) {
      log_("caBundle check of MutatingWebhookConfiguration " +
           options_.setup.webhook_configuration +
           " failed (retrying every period): " + s.ToString());
    }
    last_error = s.ok() ? "" : s.ToString();
    lock.lock();
  }
}

}  // namespace korovod::k8s_operator
