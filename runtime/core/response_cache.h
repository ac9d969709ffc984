// ResponseCache: tensors negotiated once are afterwards agreed on by one bit each. Every rank
// holds an identical cache: entries are added, touched and evicted only while executing
// responses, which every rank does in the same order, so a bit means the same tensor everywhere.
// Each rank keeps its own request next to the shared response: a later submission hits only if it
// is the same operation (same shape, dtype, op...), otherwise the entry is invalidated on every
// rank and the tensor is negotiated again.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/core/negotiation_messages.h"

namespace korovod {

class ResponseCache {
 public:
  explicit ResponseCache(int capacity) : capacity_(capacity), slots_(capacity) {}

  int capacity() const { return capacity_; }
  int size() const { return static_cast<int>(by_name_.size()); }

  enum class Lookup { kMiss, kHit, kInvalid };
  // kHit: `request` equals this rank's cached one (bit set); kInvalid: the name is cached with
  // different parameters (bit set: the entry every rank must drop).
  Lookup Find(const Request& request, int* bit) const;

  const Response& response(int bit) const { return slots_[bit]->response; }
  bool occupied(int bit) const { return slots_[bit].has_value(); }

  // Adds or replaces the entry for response.name; returns the bit evicted to make room (its old
  // tensor is no longer cached), or -1.
  int Put(const Response& response, const Request& mine);
  void Touch(int bit);  // most recently used
  void Erase(int bit);

 private:
  struct Slot {
    Response response;
    Request request;
    std::list<int>::iterator lru;
  };
  int capacity_;
  std::vector<std::optional<Slot>> slots_;
  std::unordered_map<std::string, int> by_name_;
  std::list<int> lru_;  // front: least recently used
  std::vector<int> free_;
  int next_unused_ = 0;
};

}  // namespace korovod
