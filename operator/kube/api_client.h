// A generic Kubernetes REST client: JSON in, JSON out, TLS with the kubeconfig's CA and client
// certificate held in memory, bearer tokens re-read on rotation. It knows no resource types.
// Thread-safe: each request uses its own connection (httplib clients are not thread-safe).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "operator/kube/api_result.h"
#include "operator/kube/canceller.h"
#include "operator/kube/kube_config.h"
#include "common/status.h"

namespace korovod::kube {

struct ApiClientOptions {
  std::chrono::milliseconds timeout{30000};  // per request: each read and write on the socket
  std::chrono::milliseconds connect_timeout{10000};
  std::string user_agent = "korovod-operator";
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent (a quorum read)
  int page_size = 500;           // List follows `continue` until the last page
};

enum class PatchType { kMerge, kStrategic, kJson, kApply };

struct PatchOptions {
  PatchType type = PatchType::kMerge;
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take ownership of conflicting fields
};

struct DeleteOptions {
  std::string propagation_policy;  // "Foreground", "Background", "Orphan"; "" = server default
  std::string precondition_uid;
  std::string precondition_resource_version;
  std::optional<int> grace_period_seconds;
};

// Receives a streaming response's body, chunk by chunk; returning false ends the request.
using ChunkReceiver = std::function<bool(std::string_view chunk)>;

class ApiClient {
 public:
  static StatusOr<std::unique_ptr<ApiClient>> FromConfig(KubeConfig config,
                                                         ApiClientOptions options = {});
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // `path` is the REST path (ResourceRef::Path), optionally with a query.
  ApiResult Get(const std::string& path) const;
  // Every page merged: {"kind", "apiVersion", "metadata": {"resourceVersion"}, "items": [...]}.
  ApiResult List(const std::string& path, const ListOptions& options = {}) const;
  ApiResult Create(const std::string& path, const nlohmann::json& object) const;   // POST
  ApiResult Replace(const std::string& path, const nlohmann::json& object) const;  // PUT
  ApiResult Patch(const std::string& path, const nlohmann::json& body,
                  const PatchOptions& options = {}) const;
  ApiResult Delete(const std::string& path, const DeleteOptions& options = {}) const;

  // A streaming GET (watches): 2xx bodies go to `receiver`; a non-2xx response becomes the
  // error. `read_timeout` bounds each wait for data. `canceller` (may be null) interrupts it.
  ApiResult Stream(const std::string& path, const ChunkReceiver& receiver,
                   std::chrono::milliseconds read_timeout, Canceller* canceller) const;

  const KubeConfig& config() const;

 private:
  struct Impl;
  explicit ApiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace korovod::kube
