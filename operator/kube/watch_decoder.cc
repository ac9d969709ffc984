#include "operator/kube/watch_decoder.h"

namespace korovod::kube {
namespace {

Status ParseLine(std::string_view line, WatchEvent* event) {
  nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  const std::string quote(line.substr(0, 120));
  if (json.is_discarded() || !json.is_object()) {
    return Internal("watch: malformed event: " + quote);
  }
  if (!json.contains("type") || !json["type"].is_string() || !json.contains("object")) {
    return Internal("watch: event without type or object: " + quote);
  }
  const std::string type = json["type"].get<std::string>();
  if (type == "ADDED") {
    event->type = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    event->type = WatchEventType::kModified;
  } else if (type == "DELETED") {
    event->type = WatchEventType::kDeleted;
  } else if (type == "BOOKMARK") {
    event->type = WatchEventType::kBookmark;
  } else if (type == "ERROR") {
    event->type = WatchEventType::kError;
  } else {
    return Internal("watch: unknown event type \"" + type + "\"");
  }
  event->object = std::move(json["object"]);
  return OkStatus();
}

}  // namespace

const char* WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "?";
}

Status WatchDecoder::Feed(std::string_view chunk, const Handler& handler) {
  buffer_.append(chunk);
  size_t start = 0;
  for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(buffer_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    WatchEvent event;
    Status status = ParseLine(line, &event);
    if (!status.ok()) {
      buffer_.clear();
      return status;
    }
    handler(std::move(event));
  }
  buffer_.erase(0, start);
  return OkStatus();
}

}  // namespace korovod::kube
