#include "operator/kube/informer.h"

#include <algorithm>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "common/json_read.h"
#include "operator/kube/watch.h"

namespace korovod::kube {
namespace {

const nlohmann::json& Metadata(const nlohmann::json& object) {
  return ObjectAt(object, {"metadata"});
}

std::string ResourceVersionOf(const nlohmann::json& object) {
  return StringAt(Metadata(object), {"resourceVersion"});
}

// Returns to the system the heap a list's whole objects used: glibc keeps freed memory in its
// arenas, so without this a 30 MB node list would stay in the RSS after it is trimmed. Not
// under AddressSanitizer: its allocator owns the heap, and glibc's malloc, never used, would be
// initialised by the first malloc_trim, which races when two informers trim at once (each thread
// then detaches from the main arena on exit and glibc aborts).
void ReleaseFreedHeap() {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  malloc_trim(0);
#endif
}

}  // namespace

void Informer::Ingest(nlohmann::json& object) const {
  if (auto meta = object.find("metadata"); meta != object.end() && meta->is_object()) {
    meta->erase("managedFields");
  }
  if (options_.transform) options_.transform(object);
}

std::string Informer::KeyOf(const nlohmann::json& object) {
  const nlohmann::json& meta = Metadata(object);
  const std::string ns = StringAt(meta, {"namespace"});
  const std::string name = StringAt(meta, {"name"});
  return ns.empty() ? name : ns + "/" + name;
}

Informer::Informer(const ApiClient& client, ResourceRef resource, InformerOptions options,
                   InformerHandlers handlers)
    : client_(client),
      resource_(std::move(resource)),
      options_(std::move(options)),
      handlers_(std::move(handlers)) {}

Informer::~Informer() {
  Stop();
  // An informer dropped while the process goes on (the operator's Node informer, once no
  // elastic job is left) hands its cache's memory back rather than leave it in the RSS.
  {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.clear();
  }
  ReleaseFreedHeap();
}

void Informer::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_ || stopping_) return;
  running_ = true;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  // Cancel until the thread has left: a watch that had not opened its socket when the first
  // Cancel ran is caught by the next one.
  while (running_) {
    lock.unlock();
    canceller_.Cancel();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return !running_; });
  }
  lock.unlock();
  if (thread_.joinable()) thread_.join();
}

bool Informer::HasSynced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synced_;
}

bool Informer::WaitForSync(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return synced_ || stopping_; }) && synced_;
}

std::optional<nlohmann::json> Informer::Get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(ns.empty() ? name : ns + "/" + name);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> Informer::List(const std::string& ns,
                                           const std::map<std::string, std::string>& labels) const {
  std::vector<nlohmann::json> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, object] : cache_) {
    const nlohmann::json& meta = Metadata(object);
    if (!ns.empty() && StringAt(meta, {"namespace"}) != ns) continue;
    bool match = true;
    const nlohmann::json& have = ObjectAt(meta, {"labels"});
    for (const auto& [k, v] : labels) {
      if (!have.contains(k) || StringAt(have, {k}) != v) {
        match = false;
        break;
      }
    }
    if (match) out.push_back(object);
  }
  return out;
}

void Informer::ForEach(const std::function<void(const nlohmann::json& object)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, object] : cache_) fn(object);
}

std::string Informer::resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

Status Informer::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void Informer::SetError(Status status) {
  if (handlers_.on_error) handlers_.on_error(status);
  std::lock_guard<std::mutex> lock(mu_);
  last_error_ = std::move(status);
}

void Informer::SleepBackoff(std::chrono::milliseconds delay) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, delay, [this] { return stopping_; });
}

Status Informer::Relist() {
  const std::string path = resource_.Path(options_.namespace_name);
  ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  list_options.page_size = options_.page_size;
  list_options.transform = [this](nlohmann::json& item) { Ingest(item); };
  ApiResult list = client_.List(path, list_options);
  ReleaseFreedHeap();
  if (!list.ok()) return list.status().WithContext("informer " + resource_.plural + " list");
  std::map<std::string, nlohmann::json> fresh;
  for (auto& item : list.value()["items"]) {
    std::string key = KeyOf(item);
    fresh.emplace(std::move(key), std::move(item));
  }
  // The differences become synthetic events, so handlers see a consistent story across a
  // re-list (client-go's Replace).
  std::vector<nlohmann::json> added, deleted;
  std::vector<std::pair<nlohmann::json, nlohmann::json>> updated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, object] : cache_) {
      if (!fresh.count(key)) deleted.push_back(object);
    }
    for (const auto& [key, object] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        added.push_back(object);
      } else if (ResourceVersionOf(it->second) != ResourceVersionOf(object)) {
        updated.emplace_back(it->second, object);
      }
    }
    cache_ = std::move(fresh);
    resource_version_ = StringAt(list.value(), {"metadata", "resourceVersion"});
    synced_ = true;
    last_error_ = OkStatus();
  }
  cv_.notify_all();
  for (const auto& object : deleted) {
    if (handlers_.on_delete) handlers_.on_delete(object);
  }
  for (const auto& object : added) {
    if (handlers_.on_add) handlers_.on_add(object);
  }
  for (const auto& [old_object, new_object] : updated) {
    if (handlers_.on_update) handlers_.on_update(old_object, new_object);
  }
  return OkStatus();
}

bool Informer::OnEvent(WatchEvent event) {
  nlohmann::json& object = event.object;
  if (event.type != WatchEventType::kBookmark) Ingest(object);
  const std::string rv = ResourceVersionOf(object);
  std::optional<nlohmann::json> old_object;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++events_seen_;
    if (!rv.empty()) resource_version_ = rv;
    if (stopping_) return false;
    if (event.type == WatchEventType::kBookmark) return true;
    const std::string key = KeyOf(object);
    auto it = cache_.find(key);
    if (it != cache_.end()) old_object = it->second;
    if (event.type == WatchEventType::kDeleted) {
      if (it != cache_.end()) cache_.erase(it);
    } else if (it != cache_.end()) {
      it->second = object;
    } else {
      cache_.emplace(key, object);
    }
  }
  if (event.type == WatchEventType::kDeleted) {
    if (handlers_.on_delete) handlers_.on_delete(object);
  } else if (old_object) {
    if (handlers_.on_update) handlers_.on_update(*old_object, object);
  } else if (handlers_.on_add) {
    handlers_.on_add(object);
  }
  return true;
}

void Informer::Run() {
  auto backoff = options_.min_backoff;
  auto grow = [&] { backoff = std::min(backoff * 2, options_.max_backoff); };
  bool need_list = true;
  auto stopping = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  };
  while (!stopping()) {
    try {
      if (need_list) {
        Status status = Relist();
        if (!status.ok()) {
          SetError(status);
          SleepBackoff(backoff);
          grow();
          continue;
        }
        need_list = false;
        backoff = options_.min_backoff;
      }
      WatchOptions watch;
      watch.resource_version = resource_version();
      watch.label_selector = options_.label_selector;
      watch.field_selector = options_.field_selector;
      watch.allow_bookmarks = true;
      watch.timeout_seconds = options_.watch_timeout_seconds;
      {
        std::lock_guard<std::mutex> lock(mu_);
        events_seen_ = 0;
      }
      ApiResult result = Watch(
          client_, resource_.Path(options_.namespace_name), watch,
          [this](WatchEvent event) { return OnEvent(std::move(event)); }, &canceller_);
      if (stopping()) break;
      bool delivered;
      {
        std::lock_guard<std::mutex> lock(mu_);
        delivered = events_seen_ > 0;
      }
      if (delivered) backoff = options_.min_backoff;
      if (result.ok()) continue;  // the server ended the watch: resume from resource_version_
      SetError(result.status());
      if (IsGone(result)) {
        need_list = true;  // our resourceVersion was compacted away: start over, at once
        continue;
      }
      SleepBackoff(backoff);
      grow();
    } catch (const std::exception& e) {
      // A handler threw: record it and resynchronise rather than let the thread die.
      SetError(Internal("informer " + resource_.plural + ": " + e.what()));
      need_list = true;
      SleepBackoff(backoff);
      grow();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  cv_.notify_all();
}

}  // namespace korovod::kube
