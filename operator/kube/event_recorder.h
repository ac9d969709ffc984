// Records core/v1 Events about an object, as `kubectl describe` shows them. Recording is best
// effort for callers: a failure is returned, never thrown, and never blocks reconciliation
// for longer than one request.
#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "operator/kube/api_client.h"
#include "operator/kube/api_result.h"

namespace korovod::kube {

enum class EventType { kNormal, kWarning };

const char* EventTypeName(EventType type);  // "Normal", "Warning"

class EventRecorder {
 public:
  using NowFn = std::function<std::chrono::system_clock::time_point()>;

  // `client` must outlive the recorder. `component` becomes source.component.
  EventRecorder(
      const ApiClient& client, std::string component,
      NowFn now = [] { return std::chrono::system_clock::now(); });

  // `object` needs apiVersion, kind and metadata.name; metadata.namespace ("default" when
  // absent), uid and resourceVersion are copied when present. Returns the created Event.
  ApiResult Record(const nlohmann::json& object, EventType type, const std::string& reason,
                   const std::string& message) const;

  // The Event that Record posts (exposed for tests and dry runs).
  nlohmann::json MakeEvent(const nlohmann::json& object, EventType type, const std::string& reason,
                           const std::string& message) const;

 private:
  const ApiClient& client_;
  const std::string component_;
  const NowFn now_;
};

}  // namespace korovod::kube
