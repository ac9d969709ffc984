#include "sidecar/arena/heap_allocator.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <utility>

namespace korovod::sidecar {

HeapAllocator::HeapAllocator(uint64_t capacity, std::string name)
    : HeapAllocator(capacity, std::move(name), ReserveFn()) {}

HeapAllocator::HeapAllocator(uint64_t capacity, std::string name, ReserveFn reserve)
    : capacity_(capacity / kAlignment * kAlignment),
      name_(std::move(name)),
      reserve_(std::move(reserve)) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void HeapAllocator::InsertFree(uint64_t offset, uint64_t bytes) {
  free_.emplace(offset, bytes);
  free_sizes_.insert(bytes);
}

void HeapAllocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_sizes_.erase(free_sizes_.find(it->second));
  free_.erase(it);
}

std::string HeapAllocator::Describe(uint64_t bytes) const {
  return name_ + ": cannot allocate " + std::to_string(bytes) + " bytes (" +
         std::to_string(capacity_ - used_) + " of " + std::to_string(capacity_) +
         " bytes free, largest free block " +
         std::to_string(free_sizes_.empty() ? 0 : *free_sizes_.rbegin()) + "); " +
         std::to_string(allocated_.size()) + " blocks in use hold the rest";
}

StatusOr<uint64_t> HeapAllocator::Allocate(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return AllocateLocked(bytes);
}

StatusOr<uint64_t> HeapAllocator::AllocateLocked(uint64_t bytes) {
  uint64_t need = bytes == 0 ? kAlignment : bytes;
  if (need > capacity_ || free_sizes_.empty() || need > *free_sizes_.rbegin()) {
    return Unavailable(Describe(bytes));
  }
  need = (need + kAlignment - 1) / kAlignment * kAlignment;  // <= capacity_: no overflow
  // First fit: the lowest-addressed free block that is large enough.
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first;
    if (reserve_) {
      Status s = reserve_(offset + need);
      if (!s.ok()) {
        // Not a full heap but a full /dev/shm: told apart so that a waiter does not wait it out.
        return Status(StatusCode::kFailedPrecondition,
                      name_ + ": allocating " + std::to_string(bytes) + " bytes: " + s.message());
      }
    }
    const uint64_t rest = it->second - need;
    EraseFree(it);
    if (rest > 0) InsertFree(offset + need, rest);
    allocated_.emplace(offset, need);
    used_ += need;
    return offset;
  }
  return Internal(name_ + ": free-list sizes and blocks disagree");  // unreachable
}

StatusOr<uint64_t> HeapAllocator::AllocateWaiting(uint64_t bytes, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (bytes > capacity_) {
    return InvalidArgument(name_ + ": a block of " + std::to_string(bytes) +
                           " bytes can never fit its " + std::to_string(capacity_) + " bytes");
  }
  std::optional<Deadline> shm_grace;  // /dev/shm is full: only freed blocks can still help
  for (;;) {
    auto offset = AllocateLocked(bytes);
    if (offset.ok()) return offset;
    if (offset.status().code() == StatusCode::kFailedPrecondition) {
      if (!shm_grace) shm_grace = deadline.Sooner(std::chrono::milliseconds(2000));
      if (shm_grace->Expired()) return offset.status();
    }
    if (deadline.Expired()) {
      return DeadlineExceeded(offset.status().message() +
                              "; waited for ops in flight to complete and free space, "
                              "in vain: are ranks submitting in different orders, or are "
                              "results held and never released?");
    }
    freed_.wait_for(lock, std::chrono::milliseconds(std::min(deadline.RemainingMs(), 100)));
  }
}

Status HeapAllocator::Free(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) {
    // Inside a free block: already freed (or never allocated there).
    auto f = free_.upper_bound(offset);
    if (f != free_.begin()) {
      --f;
      if (offset < f->first + f->second) {
        return InvalidArgument(name_ + ": double free of offset " + std::to_string(offset) +
                               " (it is already free)");
      }
    }
    return InvalidArgument(name_ + ": free of offset " + std::to_string(offset) +
                           ", which is not the start of an allocated block");
  }
  uint64_t start = a->first;
  uint64_t bytes = a->second;
  allocated_.erase(a);
  used_ -= bytes;
  // Coalesce with the free neighbours on either side.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + bytes) {
    bytes += next->second;
    auto victim = next++;
    EraseFree(victim);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, bytes);
  freed_.notify_all();
  return OkStatus();
}

StatusOr<uint64_t> HeapAllocator::BlockBytes(uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) {
    return InvalidArgument(name_ + ": no allocated block starts at offset " +
                           std::to_string(offset));
  }
  return a->second;
}

HeapStats HeapAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  HeapStats s;
  s.capacity = capacity_;
  s.used_bytes = used_;
  s.largest_free_block = free_sizes_.empty() ? 0 : *free_sizes_.rbegin();
  s.allocations = allocated_.size();
  s.free_blocks = free_.size();
  return s;
}

}  // namespace korovod::sidecar
