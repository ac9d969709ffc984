#include "operator/kube/watch.h"

#include <algorithm>
#include <optional>

#include "operator/kube/query.h"

namespace korovod::kube {

ApiResult Watch(const ApiClient& client, const std::string& path, const WatchOptions& options,
                const WatchHandler& on_event, Canceller* canceller) {
  Query query;
  query.Add("watch", "true")
      .Add("resourceVersion", options.resource_version)
      .Add("labelSelector", options.label_selector)
      .Add("fieldSelector", options.field_selector)
      .Add("allowWatchBookmarks", options.allow_bookmarks ? "true" : "")
      .Add("timeoutSeconds",
           options.timeout_seconds > 0 ? std::to_string(options.timeout_seconds) : "");
  const std::string url = query.AppendTo(path);
  const std::string what = "watch " + client.config().server + url;
  auto read_timeout = options.read_timeout;
  if (read_timeout.count() <= 0) {
    read_timeout = std::chrono::seconds(std::max(options.timeout_seconds, 0) + 30);
  }

  WatchDecoder decoder;
  Status decode_error;
  std::optional<ApiResult> event_error;
  bool handler_stopped = false;
  ApiResult result = client.Stream(
      url,
      [&](std::string_view chunk) {
        decode_error = decoder.Feed(chunk, [&](WatchEvent event) {
          if (handler_stopped || event_error) return;  // the rest of the chunk is dropped
          if (event.type == WatchEventType::kError) {
            event_error = ApiErrorFromStatusObject(what, event.object);
            return;
          }
          if (!on_event(std::move(event))) handler_stopped = true;
        });
        return decode_error.ok() && !handler_stopped && !event_error;
      },
      read_timeout, canceller);
  if (event_error) return *event_error;
  if (!decode_error.ok()) return ApiResult(decode_error.WithContext(what));
  if (!result.ok()) return result;
  if (handler_stopped) return nlohmann::json();
  if (decoder.pending() > 0) {
    return ApiResult(Unavailable(what + ": connection closed in the middle of an event"));
  }
  return nlohmann::json();
}

}  // namespace korovod::kube
