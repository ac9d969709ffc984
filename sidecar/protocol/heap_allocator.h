// HeapAllocator: first-fit allocation with coalescing over one arena heap, in 64-byte-aligned
// blocks. It hands out offsets relative to the heap; its bookkeeping lives in this process's
// private memory, never in the shared heap, so the peer cannot corrupt it. The client runs one
// over the client heap, the sidecar one over the result heap. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "runtime/common/status.h"

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
  HeapAllocator(const HeapAllocator&) = delete;
  HeapAllocator& operator=(const HeapAllocator&) = delete;

  // A block of at least `bytes` (0 gets a 64-byte block, so offsets stay unique). Unavailable
  // with the free space and the largest free block when nothing fits.
  StatusOr<uint64_t> Allocate(uint64_t bytes);
  // InvalidArgument for an offset that is already free (double free) or not the start of an
  // allocated block.
  Status Free(uint64_t offset);
  // The size of the allocated block at `offset` (InvalidArgument if none starts there).
  StatusOr<uint64_t> BlockBytes(uint64_t offset) const;

  HeapStats stats() const;
  uint64_t capacity() const { return capacity_; }

 private:
  void InsertFree(uint64_t offset, uint64_t bytes);  // no coalescing; mu_ held
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t capacity_;
  const std::string name_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;       // offset -> bytes, never adjacent
  std::multiset<uint64_t> free_sizes_;      // for largest_free_block
  std::map<uint64_t, uint64_t> allocated_;  // offset -> bytes
  uint64_t used_ = 0;
};

}  // namespace korovod::sidecar
