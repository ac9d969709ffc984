// Splits a watch response body (one JSON event per line, arriving in chunks that may cut a line
// anywhere) into events.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace korovod::kube {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

const char* WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  // The object; for kBookmark only metadata.resourceVersion is set; for kError a metav1.Status
  // (code 410 = the resourceVersion is too old: re-list).
  nlohmann::json object;
};

class WatchDecoder {
 public:
  using Handler = std::function<void(WatchEvent event)>;

  // Appends a chunk and calls `handler` for each complete line. A malformed line is an error
  // that quotes its start; the decoder should then be dropped with its connection.
  Status Feed(std::string_view chunk, const Handler& handler);
  // Bytes of an unfinished line (a watch that ends with one was cut mid-event).
  size_t pending() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

}  // namespace korovod::kube
