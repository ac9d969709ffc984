// The caBundle of the operator's MutatingWebhookConfiguration: EnsureCaBundle sets it on every
// webhook (writing nothing when all hold it already), and CaBundleKeeper re-checks it every
// period, because the chart's manifest leaves the field empty: a `kubectl replace`, a
// delete-and-recreate by a GitOps tool or `helm upgrade --force` would otherwise leave the API
// server unable to verify the webhook (and, with failurePolicy Fail, refusing opted-in pods)
// until the next operator restart.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "operator/kube/api_client.h"

namespace korovod::k8s_operator {

// Sets caBundle = base64(ca_pem) on every webhook of MutatingWebhookConfiguration `name`.
// *changed (may be null) says whether it wrote. FailedPrecondition when the configuration does
// not exist or has no webhooks; Aborted when someone wrote it meanwhile (retry at once).
Status EnsureCaBundle(const kube::ApiClient& client, const std::string& name,
                      const std::string& ca_pem, bool* changed = nullptr);

class CaBundleKeeper {
 public:
  using Log = std::function<void(const std::string&)>;
  // Starts checking after one period (the setup has just set it).
  CaBundleKeeper(const kube::ApiClient& client, std::string configuration, std::string ca_pem,
                 std::chrono::milliseconds period, Log log);
  ~CaBundleKeeper();  // stops and joins
  CaBundleKeeper(const CaBundleKeeper&) = delete;
  CaBundleKeeper& operator=(const CaBundleKeeper&) = delete;

 private:
  void Run();

  const kube::ApiClient& client_;
  const std::string configuration_;
  const std::string ca_pem_;
  const std::chrono::milliseconds period_;
  const Log log_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace korovod::k8s_operator
