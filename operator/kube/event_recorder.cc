#include "operator/kube/event_recorder.h"

#include <cstdio>
#include <optional>
#include <random>

#include "common/json_read.h"
#include "common/rfc3339.h"
#include "operator/kube/resource.h"

namespace korovod::kube {

const char* EventTypeName(EventType type) {
  return type == EventType::kWarning ? "Warning" : "Normal";
}

EventRecorder::EventRecorder(const ApiClient& client, std::string component, NowFn now,
                             EventAggregation aggregation)
    : client_(client),
      component_(std::move(component)),
      now_(std::move(now)),
      aggregation_(aggregation) {}

nlohmann::json EventRecorder::MakeEvent(const nlohmann::json& object, EventType type,
                                        const std::string& reason,
                                        const std::string& message) const {
  const nlohmann::json& meta = ObjectAt(object, {"metadata"});
  const std::string name = StringAt(meta, {"name"});
  const std::string ns = StringAt(meta, {"namespace"}, "default");
  nlohmann::json involved = {
      {"apiVersion", StringAt(object, {"apiVersion"})},
      {"kind", StringAt(object, {"kind"})},
      {"name", name},
      {"namespace", ns},
  };
  if (meta.contains("uid")) involved["uid"] = meta["uid"];
  if (meta.contains("resourceVersion")) involved["resourceVersion"] = meta["resourceVersion"];

  // Unique per event like client-go's "<name>.<unix nanos in hex>"; random bits avoid clashes
  // between replicas that record in the same nanosecond.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto now = now_();
  const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch());
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "%llx%04x", static_cast<unsigned long long>(nanos.count()),
                static_cast<unsigned>(rng() & 0xffff));
  const std::string stamp = FormatRfc3339(now);
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name + "." + suffix}, {"namespace", ns}}},
      {"involvedObject", std::move(involved)},
      {"type", EventTypeName(type)},
      {"reason", reason},
      {"message", message},
      {"source", {{"component", component_}}},
      {"reportingComponent", component_},
      {"firstTimestamp", stamp},
      {"lastTimestamp", stamp},
      {"count", 1},
  };
}

// client-go's getEventKey: the source, the involved object (not its resourceVersion, which
// moves with every status write), type, reason and message.
std::string EventRecorder::KeyOf(const nlohmann::json& event) const {
  const nlohmann::json& o = event["involvedObject"];
  std::string key;
  for (const std::string& part :
       {component_, StringAt(o, {"apiVersion"}), StringAt(o, {"kind"}), StringAt(o, {"namespace"}),
        StringAt(o, {"name"}), StringAt(o, {"uid"}), StringAt(event, {"type"}),
        StringAt(event, {"reason"}), StringAt(event, {"message"})}) {
    key += part;
    key += '\0';
  }
  return key;
}

void EventRecorder::Remember(const std::string& key, Seen seen) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = seen_.find(key); it != seen_.end()) {
    lru_.erase(it->second.lru);
    seen_.erase(it);
  }
  lru_.push_front(key);
  seen.lru = lru_.begin();
  seen_.emplace(key, std::move(seen));
  while (seen_.size() > aggregation_.max_keys) {
    seen_.erase(lru_.back());
    lru_.pop_back();
  }
}

size_t EventRecorder::cached_keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seen_.size();
}

ApiResult EventRecorder::Create(const std::string& key, const nlohmann::json& event,
                                std::chrono::system_clock::time_point now) const {
  const std::string ns = StringAt(event["metadata"], {"namespace"});
  ApiResult result = client_.Create(kEvents.Path(ns), event);
  if (result.ok()) {
    Seen seen;
    seen.name = StringAt(event["metadata"], {"name"});
    seen.ns = ns;
    seen.last = now;
    Remember(key, std::move(seen));
  }
  return result;
}

ApiResult EventRecorder::Record(const nlohmann::json& object, EventType type,
                                const std::string& reason, const std::string& message) const {
  const std::string name = StringAt(object, {"metadata", "name"});
  if (name.empty()) {
    return ApiResult(InvalidArgument("event " + reason + ": involved object has no metadata.name"));
  }
  nlohmann::json event = MakeEvent(object, type, reason, message);
  const std::string ns = StringAt(event["metadata"], {"namespace"});
  const std::string key = KeyOf(event);
  std::optional<Seen> repeat;
  const auto now = now_();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = seen_.find(key);
    if (it != seen_.end() && now - it->second.last < aggregation_.window) repeat = it->second;
  }
  ApiResult result(nlohmann::json::object());
  if (repeat) {
    // A repeat: one more on the Event already there. Not found (its TTL expired, someone
    // deleted it): a new one.
    repeat->count += 1;
    repeat->last = now;
    const nlohmann::json patch = {{"count", repeat->count}, {"lastTimestamp", FormatRfc3339(now)}};
    result = client_.Patch(kEvents.Path(repeat->ns, repeat->name), patch);
    if (result.ok()) {
      Remember(key, std::move(*repeat));
    } else if (IsNotFound(result)) {
      result = Create(key, event, now);
    }
  } else {
    result = Create(key, event, now);
  }
  if (!result.ok()) {
    return ApiResult(
        result.status().WithContext("event " + reason + " on " + StringAt(object, {"kind"}) + " " +
                                    ns + "/" + name),
        result.http_code(), result.reason());
  }
  return result;
}

}  // namespace korovod::kube
