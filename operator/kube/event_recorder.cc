#include "operator/kube/event_recorder.h"

#include <cstdio>
#include <random>

#include "common/json_read.h"
#include "common/rfc3339.h"
#include "operator/kube/resource.h"

namespace korovod::kube {

const char* EventTypeName(EventType type) {
  return type == EventType::kWarning ? "Warning" : "Normal";
}

EventRecorder::EventRecorder(const ApiClient& client, std::string component, NowFn now)
    : client_(client), component_(std::move(component)), now_(std::move(now)) {}

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

ApiResult EventRecorder::Record(const nlohmann::json& object, EventType type,
                                const std::string& reason, const std::string& message) const {
  const std::string name = StringAt(object, {"metadata", "name"});
  if (name.empty()) {
    return ApiResult(InvalidArgument("event " + reason + ": involved object has no metadata.name"));
  }
  nlohmann::json event = MakeEvent(object, type, reason, message);
  const std::string ns = StringAt(event["metadata"], {"namespace"});
  ApiResult result = client_.Create(kEvents.Path(ns), event);
  if (!result.ok()) {
    return ApiResult(
        result.status().WithContext("event " + reason + " on " + StringAt(object, {"kind"}) + " " +
                                    ns + "/" + name),
        result.http_code(), result.reason());
  }
  return result;
}

}  // namespace korovod::kube
