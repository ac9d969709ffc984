#include "operator/manager/ca_bundle_keeper.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "common/base64.h"
#include "operator/kube/api_result.h"
#include "operator/kube/resource.h"

namespace korovod::k8s_operator {
namespace {

const kube::ResourceRef kMutatingWebhookConfigurations{"admissionregistration.k8s.io", "v1",
                                                       "mutatingwebhookconfigurations", false};

}  // namespace

Status EnsureCaBundle(const kube::ApiClient& client, const std::string& name,
                      const std::string& ca_pem, bool* changed) {
  if (changed) *changed = false;
  const std::string what = "MutatingWebhookConfiguration " + name;
  const std::string path = kMutatingWebhookConfigurations.Path("", name);
  kube::ApiResult got = client.Get(path);
  if (kube::IsNotFound(got)) return FailedPrecondition(what + " does not exist (yet)");
  if (!got.ok()) return got.status();
  nlohmann::json config = std::move(got).value();
  auto hooks = config.find("webhooks");
  if (hooks == config.end() || !hooks->is_array() || hooks->empty()) {
    return FailedPrecondition(what + " has no webhooks");
  }
  const std::string bundle = Base64Encode(ca_pem);
  bool differs = false;
  for (nlohmann::json& hook : *hooks) {
    nlohmann::json& client_config = hook["clientConfig"];
    if (client_config.value("caBundle", std::string()) != bundle) {
      client_config["caBundle"] = bundle;
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

CaBundleKeeper::CaBundleKeeper(const kube::ApiClient& client, std::string configuration,
                               std::string ca_pem, std::chrono::milliseconds period, Log log)
    : client_(client),
      configuration_(std::move(configuration)),
      ca_pem_(std::move(ca_pem)),
      period_(period),
      log_(std::move(log)),
      thread_([this] { Run(); }) {}

CaBundleKeeper::~CaBundleKeeper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CaBundleKeeper::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  std::string last_error;  // logged once until it changes, not every period
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    bool changed = false;
    Status s = EnsureCaBundle(client_, configuration_, ca_pem_, &changed);
    if (log_ && changed) {
      log_("caBundle of MutatingWebhookConfiguration " + configuration_ +
           " was changed or removed: restored");
    }
    if (log_ && !s.ok() && s.ToString() != last_error) {
      log_("caBundle check of MutatingWebhookConfiguration " + configuration_ +
           " failed (retrying every period): " + s.ToString());
    }
    last_error = s.ok() ? "" : s.ToString();
    lock.lock();
  }
}

}  // namespace korovod::k8s_operator
