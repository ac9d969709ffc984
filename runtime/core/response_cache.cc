#include "runtime/core/response_cache.h"

#include <algorithm>

namespace korovod {

ResponseCache::Lookup ResponseCache::Find(const Request& request, int* bit) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *bit = it->second;
  return slots_[it->second]->request.SameAs(request) ? Lookup::kHit : Lookup::kInvalid;
}

int ResponseCache::Put(const Response& response, const Request& mine) {
  if (capacity_ == 0) return -1;
  if (auto it = by_name_.find(response.name); it != by_name_.end()) {
    Slot& s = *slots_[it->second];
    s.response = response;
    s.request = mine;
    Touch(it->second);
    return -1;
  }
  int bit = -1;
  int evicted = -1;
  if (!free_.empty()) {
    // Lowest free bit first, so every rank picks the same one.
    auto lowest = std::min_element(free_.begin(), free_.end());
    bit = *lowest;
    free_.erase(lowest);
  } else if (next_unused_ < capacity_) {
    bit = next_unused_++;
  } else {
    bit = evicted = lru_.front();
    Erase(bit);
    free_.pop_back();
  }
  lru_.push_back(bit);
  slots_[bit] = Slot{response, mine, std::prev(lru_.end())};
  by_name_[response.name] = bit;
  return evicted;
}

void ResponseCache::Touch(int bit) {
  Slot& s = *slots_[bit];
  lru_.splice(lru_.end(), lru_, s.lru);
}

void ResponseCache::Erase(int bit) {
  if (!slots_[bit]) return;
  by_name_.erase(slots_[bit]->response.name);
  lru_.erase(slots_[bit]->lru);
  slots_[bit].reset();
  free_.push_back(bit);
}

}  // namespace korovod
