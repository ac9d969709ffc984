// HeapAllocator: first-fit allocation with coalescing over one arena heap, in 64-byte-aligned
// blocks. It hands out offsets relative to the heap; its bookkeeping lives in this process's
// private memory, never in the shared heap, so the peer cannot corrupt it. The client runs one
// over the client heap, the sidecar one over the result heap. Thread-safe.
//
// Growth: the heap's capacity is address space; a Reserve hook backs the part in use (first fit
// keeps blocks low, so what is backed follows the peak in use). AllocateWaiting waits for frees
// when the heap is full or cannot grow, so a burst larger than the heap completes instead of
// failing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "common/deadline.h"
#include "common/status.h"

namespace korovod::sidecar {

struct HeapStats {
  uint64_t capacity = 0;            // bytes managed
  uint64_t used_bytes = 0;          // in allocated blocks (rounded up to 64)
  uint64_t largest_free_block = 0;  // the largest Allocate that can succeed now
  uint64_t allocations = 0;         // blocks allocated now
  uint64_t free_blocks = 0;         // fragments of free space
};

class HeapAllocator {
 public:
  static constexpr uint64_t kAlignment = 64;

  // Manages [0, capacity) rounded down to kAlignment. `name` prefixes errors ("result heap").
  explicit HeapAllocator(uint64_t capacity, std::string name = "heap");
  // Called (under the allocator's lock) before a block ending at `end` bytes is handed out, so
  // memory is backed before anyone touches it; an error leaves the block free and is returned.
  using ReserveFn = std::function<Status(uint64_t end)>;
  HeapAllocator(uint64_t capacity, std::string name, ReserveFn reserve);
  HeapAllocator(const HeapAllocator&) = delete;
  HeapAllocator& operator=(const HeapAllocator&) = delete;

  // A block of at least `bytes` (0 gets a 64-byte block, so offsets stay unique). Unavailable
  // with the free space and the largest free block when nothing fits.
  StatusOr<uint64_t> Allocate(uint64_t bytes);
  // Allocate, waiting for Free while nothing fits (or the heap cannot grow) until `deadline`.
  // A block larger than the whole heap is InvalidArgument at once; running out of time is
  // DeadlineExceeded with what holds the heap.
  StatusOr<uint64_t> AllocateWaiting(uint64_t bytes, Deadline deadline);
  // InvalidArgument for an offset that is already free (double free) or not the start of an
  // allocated block.
  Status Free(uint64_t offset);
  // The size of the allocated block at `offset` (InvalidArgument if none starts there).
  StatusOr<uint64_t> BlockBytes(uint64_t offset) const;

  HeapStats stats() const;
  uint64_t capacity() const { return capacity_; }

 private:
  StatusOr<uint64_t> AllocateLocked(uint64_t bytes);  // mu_ held
  std::string Describe(uint64_t bytes) const;         // mu_ held
  void InsertFree(uint64_t offset, uint64_t bytes);   // no coalescing; mu_ held
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t capacity_;
  const std::string name_;
  const ReserveFn reserve_;
  mutable std::mutex mu_;
  std::condition_variable freed_;           // notified by Free
  std::map<uint64_t, uint64_t> free_;       // offset -> bytes, never adjacent
  std::multiset<uint64_t> free_sizes_;      // for largest_free_block
  std::map<uint64_t, uint64_t> allocated_;  // offset -> bytes
  uint64_t used_ = 0;
};

}  // namespace korovod::sidecar
