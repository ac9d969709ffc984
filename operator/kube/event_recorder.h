// Records core/v1 Events about an object, as `kubectl describe` shows them. Recording is best
// effort for callers: a failure is returned, never thrown, and never blocks reconciliation
// for longer than one request.
//
// Repeats are aggregated as client-go's EventCorrelator does: the same event (involved object
// uid/kind/name, type, reason, message) recorded again within `window` of the last one PATCHes
// the existing Event's count and lastTimestamp instead of creating another, so a worker that
// keeps failing to start is one Event with a count, not one object in etcd per retry. The keys
// are kept in an LRU of `max_keys` entries: memory stays bounded whatever the churn.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "operator/kube/api_client.h"
#include "operator/kube/api_result.h"

namespace korovod::kube {

enum class EventType { kNormal, kWarning };

const char* EventTypeName(EventType type);  // "Normal", "Warning"

struct EventAggregation {
  // A repeat within this long of the last occurrence is counted on the existing Event (client-go
  // aggregates over 10 minutes too); a later one starts a new Event.
  std::chrono::seconds window{600};
  size_t max_keys = 4096;  // client-go's LRU size
};

class EventRecorder {
 public:
  using NowFn = std::function<std::chrono::system_clock::time_point()>;

  // `client` must outlive the recorder. `component` becomes source.component.
  EventRecorder(
      const ApiClient& client, std::string component,
      NowFn now = [] { return std::chrono::system_clock::now(); },
      EventAggregation aggregation = {});

  // `object` needs apiVersion, kind and metadata.name; metadata.namespace ("default" when
  // absent), uid and resourceVersion are copied when present. Returns the created Event, or the
  // patched one when this is a repeat. Thread-safe.
  ApiResult Record(const nlohmann::json& object, EventType type, const std::string& reason,
                   const std::string& message) const;

  size_t cached_keys() const;  // for tests: never above EventAggregation::max_keys

  // The Event that Record posts (exposed for tests and dry runs).
  nlohmann::json MakeEvent(const nlohmann::json& object, EventType type, const std::string& reason,
                           const std::string& message) const;

 private:
  // The last Event recorded for one key.
  struct Seen {
    std::string name;  // metadata.name of the Event
    std::string ns;
    int64_t count = 1;
    std::chrono::system_clock::time_point last;
    std::list<std::string>::iterator lru;  // its place in lru_ (front: most recent)
  };

  std::string KeyOf(const nlohmann::json& event) const;
  ApiResult Create(const std::string& key, const nlohmann::json& event,
                   std::chrono::system_clock::time_point now) const;
  void Remember(const std::string& key, Seen seen) const;

  const ApiClient& client_;
  const std::string component_;
  const NowFn now_;
  const EventAggregation aggregation_;
  // The correlator's state: a cache, so Record stays const for its callers.
  mutable std::mutex mu_;
  mutable std::list<std::string> lru_;
  mutable std::unordered_map<std::string, Seen> seen_;
};

}  // namespace korovod::kube
