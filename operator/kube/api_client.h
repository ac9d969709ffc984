// A generic Kubernetes REST client: JSON in, JSON out, TLS with the kubeconfig's CA and client
// certificate held in memory, bearer tokens re-read on rotation. It knows no resource types.
// Thread-safe: requests take a kept-alive connection from a small pool (each httplib client is
// used by one thread at a time) and put it back; watches (Stream) have a connection of their own.
// Every request but a watch first takes a token from the client-side rate limiter (qps, burst).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "operator/kube/api_result.h"
#include "operator/kube/canceller.h"
#include "operator/kube/kube_config.h"

namespace korovod::kube {

struct ApiClientOptions {
  std::chrono::milliseconds timeout{30000};  // per request: each read and write on the socket
  std::chrono::milliseconds connect_timeout{10000};
  std::string user_agent = "korovod-operator";
  // Client-side rate limit shared by every request but watches (rate_limiter.h, as client-go's
  // QPS and Burst); qps <= 0: none.
  double qps = 0;
  int burst = 1;
  // Idle kept-alive connections kept for reuse; more threads than this at once open more,
  // closed when returned to a full pool. 0: a fresh connection per request.
  int max_idle_connections = 4;
  // Called after each rate-limited request's wait (0 when a token was free), on its thread.
  std::function<void(std::chrono::nanoseconds waited)> on_rate_limit_wait;
  // Asked right before a request other than GET goes on the wire (after the rate limiter's wait
  // and taking a connection): an error is the request's result and nothing is sent. A leader's
  // fence: a replica paused or deposed while its writes waited for a token sends none of them.
  std::function<Status()> write_fence;
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent (a quorum read)
  int page_size = 500;           // List follows `continue` until the last page
  // Applied to each item as its page arrives, so that a caller keeping a trimmed copy never
  // holds every page's whole objects at once (an informer's transform). Null: items as sent.
  std::function<void(nlohmann::json& item)> transform;
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
