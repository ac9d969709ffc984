#include "operator/kube/work_queue.h"

#include <algorithm>
#include <cstdint>

namespace korovod::kube {

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;  // queued again by Done()
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  if (delay.count() <= 0) {
    AddLocked(key);
    return;
  }
  const auto due = SteadyClock::now() + delay;
  auto it = waiting_at_.find(key);
  if (it != waiting_at_.end()) {
    if (it->second <= due) return;
    waiting_.erase({it->second, key});
  }
  waiting_at_[key] = due;
  waiting_.insert({due, key});
  cv_.notify_all();  // a getter may now have an earlier wake-up time
}

void WorkQueue::AddRateLimited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = failures_[key]++;
    // Doubling from base; the shift is bounded so it cannot overflow before the cap applies.
    const auto factor = int64_t{1} << std::min(n, 30);
    delay = std::min(options_.base_delay * factor, options_.max_delay);
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::PromoteDueLocked(SteadyClock::time_point now) {
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    std::string key = waiting_.begin()->second;
    waiting_.erase(waiting_.begin());
    waiting_at_.erase(key);
    AddLocked(key);
  }
}

std::optional<std::string> WorkQueue::Get(SteadyClock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (shutting_down_) return std::nullopt;
    const auto now = SteadyClock::now();
    PromoteDueLocked(now);
    if (!queue_.empty()) break;
    if (now >= deadline) return std::nullopt;
    auto wake = deadline;
    if (!waiting_.empty()) wake = std::min(wake, waiting_.begin()->first);
    cv_.wait_until(lock, wake);
  }
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key) && !shutting_down_) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
}

bool WorkQueue::shutting_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = SteadyClock::now();
  size_t due = 0;
  for (const auto& [at, key] : waiting_) {
    if (at > now) break;
    if (!dirty_.count(key)) ++due;
  }
  return queue_.size() + due;
}

}  // namespace korovod::kube
