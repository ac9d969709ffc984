// The caBundle of the operator's MutatingWebhookConfiguration. EnsureCaBundle puts a CA into
// every webhook's caBundle (writing nothing when all hold it already); CaBundleKeeper re-checks
// every period, because the chart's manifest leaves the field empty (a `kubectl replace`, a
// delete-and-recreate by a GitOps tool or `helm upgrade --force` would otherwise leave the API
// server unable to verify the webhook until the next operator restart), and because the CA may
// change under a running replica: the documented rotation deletes the CA Secret and restarts
// the operator, so for a while old replicas serve a certificate of the old CA and new ones of
// the new CA.
//
// How replicas agree without rewriting each other's caBundle (issue 31): the CA Secret is the
// source of truth, re-read every period, never what a replica loaded at its start. A replica
// only ever adds the Secret's CA, and removes other CAs only once it has served the Secret's CA
// itself for `retire_after` (two periods): by then every replica's keeper has seen the new
// Secret and switched its serving certificate to it (switching only once the caBundle holds the
// new CA). Through a rotation the caBundle therefore holds the old and the new CA, and no
// replica's certificate is refused by the API server.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "operator/kube/api_client.h"
#include "operator/manager/webhook_certificate_setup.h"

namespace korovod::k8s_operator {

// The PEM certificates of a bundle, each block as written (without carriage returns) and ending
// in a newline, each certificate once; text outside BEGIN/END CERTIFICATE lines is dropped.
std::vector<std::string> SplitPemBundle(std::string_view bundle);

// Whether two bundles hold the same certificates in the same order (line lengths and endings
// aside).
bool SameCertificates(std::string_view a, std::string_view b);

// Makes `ca_pem` part of caBundle on every webhook of MutatingWebhookConfiguration `name`: added
// first, the CAs already there kept after it, or, with `retire_others`, dropped. *changed (may
// be null) says whether it wrote. FailedPrecondition when the configuration does not exist or
// has no webhooks; Aborted when someone wrote it meanwhile (retry at once).
Status EnsureCaBundle(const kube::ApiClient& client, const std::string& name,
                      const std::string& ca_pem, bool retire_others, bool* changed = nullptr);

struct CaBundleKeeperOptions {
  // The CA Secret, the configuration, the serving certificate's names and its directory: as
  // given to SetUpWebhookCertificate.
  WebhookCertificateSetupOptions setup;
  std::string serving_ca_pem;  // the CA whose certificate this replica serves now
  std::chrono::milliseconds period{std::chrono::seconds(60)};
  // Other CAs leave the caBundle once this replica has served the Secret's CA this long; zero:
  // two periods.
  std::chrono::milliseconds retire_after{0};
};

class CaBundleKeeper {
 public:
  using Log = std::function<void(const std::string&)>;
  // Starts checking after one period (the setup has just set it).
  CaBundleKeeper(const kube::ApiClient& client, CaBundleKeeperOptions options, Log log);
  ~CaBundleKeeper();  // stops and joins
  CaBundleKeeper(const CaBundleKeeper&) = delete;
  CaBundleKeeper& operator=(const CaBundleKeeper&) = delete;

 private:
  void Run();
  Status CheckOnce();  // one period's work; logs what it changed

  const kube::ApiClient& client_;
  const CaBundleKeeperOptions options_;
  const Log log_;
  std::string serving_ca_;  // only Run's thread touches these two
  std::chrono::steady_clock::time_point serving_since_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace korovod::k8s_operator
