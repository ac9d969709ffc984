// A local, watched copy of one kind of resource (client-go's informer): list, then watch from
// the list's resourceVersion, reconnect from the last seen resourceVersion, re-list when it is
// too old (410), back off on errors. Handlers run on the informer's own thread, in event order.
// Objects are trimmed at ingest (client-go's SetTransform): metadata.managedFields is always
// dropped, then the options' transform runs, before an object is cached or handed to a handler;
// a list applies it page by page, so the whole objects of a large list are never all held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "operator/kube/api_client.h"
#include "operator/kube/canceller.h"
#include "operator/kube/resource.h"
#include "operator/kube/watch_decoder.h"

namespace korovod::kube {

struct InformerHandlers {
  std::function<void(const nlohmann::json& object)> on_add;
  std::function<void(const nlohmann::json& old_object, const nlohmann::json& new_object)> on_update;
  std::function<void(const nlohmann::json& object)> on_delete;  // the last state seen
  // A list or watch failed (the informer retries on its own; a 410 is followed by a re-list).
  std::function<void(const Status& error)> on_error;
};

struct InformerOptions {
  std::string namespace_name;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  std::chrono::milliseconds min_backoff{200};  // after an error; doubles, reset on success
  std::chrono::milliseconds max_backoff{30000};
  int watch_timeout_seconds = 300;
  // Items per list page. With a transform that keeps little of large objects, a smaller page
  // bounds the whole objects held at once (and the heap they fragment).
  int page_size = 500;
  // Keeps only what the caller reads of each object (after managedFields is dropped). It must
  // keep metadata.name, namespace and resourceVersion (the cache's key and the watch's resume
  // point); it runs on the informer's thread. Null: objects are kept whole.
  std::function<void(nlohmann::json& object)> transform;
};

class Informer {
 public:
  // `client` must outlive the informer.
  Informer(const ApiClient& client, ResourceRef resource, InformerOptions options,
           InformerHandlers handlers);
  ~Informer();  // Stop(), then the cache's memory goes back to the system
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  // Ends the watch (its socket is shut down) and joins the thread. Idempotent; not restartable.
  void Stop();

  // True once the first list has filled the cache.
  bool HasSynced() const;
  bool WaitForSync(std::chrono::steady_clock::time_point deadline) const;

  // Cache reads. Keys are "namespace/name" ("name" for cluster-scoped objects).
  std::optional<nlohmann::json> Get(const std::string& ns, const std::string& name) const;
  // Objects in `ns` ("" = all) whose labels contain every pair of `labels`.
  std::vector<nlohmann::json> List(const std::string& ns = "",
                                   const std::map<std::string, std::string>& labels = {}) const;
  // Calls `fn` on every cached object without copying it, under the cache's lock: `fn` must not
  // call back into the informer.
  void ForEach(const std::function<void(const nlohmann::json& object)>& fn) const;
  // The resourceVersion the next watch starts from (from the last event or bookmark).
  std::string resource_version() const;
  // The most recent list/watch failure (OK when none since the last success).
  Status last_error() const;

  static std::string KeyOf(const nlohmann::json& object);

 private:
  void Run();
  Status Relist();
  bool OnEvent(WatchEvent event);
  void Ingest(nlohmann::json& object) const;  // drops managedFields, then the transform
  void SleepBackoff(std::chrono::milliseconds delay);
  void SetError(Status status);

  const ApiClient& client_;
  const ResourceRef resource_;
  const InformerOptions options_;
  const InformerHandlers handlers_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, nlohmann::json> cache_;
  std::string resource_version_;
  bool synced_ = false;
  bool stopping_ = false;
  bool running_ = false;
  Status last_error_;
  int events_seen_ = 0;  // by the current watch; a watch that delivered resets the backoff

  Canceller canceller_;
  std::thread thread_;
};

}  // namespace korovod::kube
