// A work queue of keys with client-go's semantics: a key is queued at most once; a key being
// processed is never handed to a second worker, and one re-added meanwhile is queued again when
// Done() is called. Delayed and rate-limited adds need no thread: Get() waits for the earliest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace korovod::kube {

struct WorkQueueOptions {
  std::chrono::milliseconds base_delay{5};  // AddRateLimited: base * 2^failures, capped
  std::chrono::milliseconds max_delay{60000};
};

class WorkQueue {
 public:
  using SteadyClock = std::chrono::steady_clock;

  explicit WorkQueue(WorkQueueOptions options = {}) : options_(options) {}

  void Add(const std::string& key);
  // Adds after `delay`; a key already waiting keeps the earlier of the two times.
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // Adds after this key's backoff, which doubles with each call until Forget(key).
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // The next key, or nullopt at `deadline` or once shut down. The caller must call Done(key).
  std::optional<std::string> Get(SteadyClock::time_point deadline);
  void Done(const std::string& key);

  // Wakes every Get(); later Adds are dropped.
  void ShutDown();
  bool shutting_down() const;
  // Keys ready to be handed out (for metrics); delayed keys are not counted until due.
  size_t Len() const;

 private:
  void AddLocked(const std::string& key);
  void PromoteDueLocked(SteadyClock::time_point now);

  const WorkQueueOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::unordered_set<std::string> dirty_;       // queued or to be re-queued on Done
  std::unordered_set<std::string> processing_;  // handed out, Done not yet called
  std::set<std::pair<SteadyClock::time_point, std::string>> waiting_;  // AddAfter, by due time
  std::unordered_map<std::string, SteadyClock::time_point> waiting_at_;
  std::unordered_map<std::string, int> failures_;
  bool shutting_down_ = false;
};

}  // namespace korovod::kube
