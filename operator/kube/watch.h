// One watch request: streams a collection's changes from a resourceVersion until the server
// ends it, the handler says stop, or a Canceller fires. Reconnecting is the caller's job
// (Informer does it).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "operator/kube/api_client.h"
#include "operator/kube/api_result.h"
#include "operator/kube/canceller.h"
#include "operator/kube/watch_decoder.h"

namespace korovod::kube {

struct WatchOptions {
  std::string resource_version;  // "" = from now, after a synthetic ADDED for each object
  std::string label_selector;
  std::string field_selector;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // the server closes the watch after this
  // Longest silence tolerated before the connection is presumed dead. 0 = timeout_seconds+30s.
  std::chrono::milliseconds read_timeout{0};
};

// Returns true to keep watching, false to end the watch (Watch then returns OK).
using WatchHandler = std::function<bool(WatchEvent event)>;

// `path` is a collection path (ResourceRef::Path(ns)). ADDED, MODIFIED, DELETED and BOOKMARK go
// to `on_event`. An ERROR event ends the watch and is returned as the error (IsGone for code
// 410: the resourceVersion is too old and the caller must re-list), as is a non-2xx response.
// A clean end by the server returns OK. Cancel() returns kAborted promptly (the socket is shut).
ApiResult Watch(const ApiClient& client, const std::string& path, const WatchOptions& options,
                const WatchHandler& on_event, Canceller* canceller);

}  // namespace korovod::kube
