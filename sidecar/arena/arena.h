// Arena: one mapping of the shared-memory arena (arena_layout.h). The sidecar creates it (POSIX
// shm, mode 0660; header, queues and the first part of each heap reserved up front), the trainer
// opens it by name and gets a clear error when the bytes are not an arena or speak another
// protocol version. One client session per arena.
//
// Growth: both sides map each heap at its full size (address space only), and reserve /dev/shm
// pages (Reserve) before they touch a part of a heap that may not be backed yet: the client for
// its own allocations, the sidecar for its result blocks and for any client range a record names.
// So a full /dev/shm is an error naming it, never a SIGBUS, whoever touches the page first.
//
// Trust: the sidecar never re-reads the layout from shared memory (layout() is a private copy
// checked at Open/computed at Create), so a client scribbling on the header cannot move the
// sidecar's view of the regions.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "common/shared_memory.h"
#include "common/status.h"
#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar {

enum class ArenaSide { kSidecar, kClient };
enum class ArenaHeap { kClient, kResult };

class Arena {
 public:
  // Sidecar side. `name` is a POSIX shm name: "/" followed by 1-254 characters, no other "/".
  // The sidecar holds an exclusive flock on the arena for its life (the kernel drops it however
  // the process ends). An arena of that name left by a dead sidecar (the lock is free: a
  // restarted native sidecar, whose pod's /dev/shm survived) is removed and created afresh;
  // one whose lock a live process holds fails, naming it, as does a /dev/shm that cannot hold it.
  static StatusOr<std::unique_ptr<Arena>> Create(const std::string& name, const ArenaSizes& sizes);
  // Client side. Checks magic, protocol version, header, layout and file size; refuses a second
  // client while one is attached.
  static StatusOr<std::unique_ptr<Arena>> Open(const std::string& name);

  // Unmaps. The sidecar's arena marks itself dead, closes both queues (waking a blocked client)
  // and unlinks the name unless Unlink() already ran; a client's marks itself detached and closes
  // both queues (waking a blocked sidecar).
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Removes the name from /dev/shm; mappings stay valid. Once both sides have the arena mapped the
  // sidecar may unlink it so that nothing is left behind if either is killed.
  Status Unlink();

  const std::string& name() const { return name_; }
  ArenaSide side() const { return side_; }
  const ArenaLayout& layout() const { return layout_; }
  ArenaHeader& header() { return *reinterpret_cast<ArenaHeader*>(base_); }
  std::byte* base() { return base_; }

  std::span<std::byte> region(const Region& r) { return {base_ + r.offset, r.bytes}; }
  std::span<std::byte> submission_slots() { return region(layout_.submission_queue); }
  std::span<std::byte> completion_slots() { return region(layout_.completion_queue); }
  std::span<std::byte> client_heap() { return region(layout_.client_heap); }
  std::span<std::byte> result_heap() { return region(layout_.result_heap); }
  const Region& heap_region(ArenaHeap heap) const {
    return heap == ArenaHeap::kClient ? layout_.client_heap : layout_.result_heap;
  }

  // Makes sure /dev/shm backs `heap` from its start up to `end` bytes (rounded up to
  // kReserveStepBytes, capped at the heap's size). Cheap when already reserved; Unavailable naming
  // /dev/shm and the sizes when it is full. Thread-safe.
  Status Reserve(ArenaHeap heap, uint64_t end);
  static constexpr uint64_t kReserveStepBytes = uint64_t{8} << 20;
  // Bytes of `heap` this side has reserved so far.
  uint64_t reserved(ArenaHeap heap);

  // The other side's liveness word (a process that was killed leaves it set: pair this with the
  // gRPC session for death detection).
  bool peer_alive();
  // Client side: OK while the sidecar process lives and runs. Unavailable when it shut down, or
  // died without a word (its flock on the arena is free: SIGKILL, the OOM killer, a crash; the
  // text says whether a new sidecar has since created this arena's name, i.e. it restarted);
  // DeadlineExceeded when its heartbeat has not moved for `unresponsive_after` (SIGSTOP).
  Status CheckSidecar(std::chrono::milliseconds unresponsive_after);
  // Whether this arena's name now leads to another object than the one mapped here: a new
  // sidecar created it again (a restart).
  bool Replaced() const;
  // Sidecar side: proof of life for CheckSidecar (its op loop calls it every ~100 ms).
  void Heartbeat() { header().sidecar_heartbeat.value.fetch_add(1, std::memory_order_relaxed); }
  // Sidecar: forgets a client that went away without detaching, so a new one may Open.
  void ReleaseClient();

 private:
  struct Key {};  // only Create/Open construct

 public:
  Arena(Key, std::string name, ArenaSide side, ShmSegment segment, ShmMapping mapping);

 private:
  std::string name_;
  ArenaSide side_;
  // Kept for Reserve (the name is unlinked once both sides have mapped it). The sidecar's owns
  // the name until Unlink(): destroying it removes the name.
  ShmSegment segment_;
  ShmMapping mapping_;
  std::byte* base_;  // mapping_.data()
  ArenaLayout layout_;
  std::mutex reserve_mu_;
  uint64_t reserved_[2] = {0, 0};  // per ArenaHeap, guarded by reserve_mu_
  bool attached_ = false;          // fully created/opened: the destructor updates the header
  // CheckSidecar's view of the heartbeat (client side).
  uint32_t seen_heartbeat_ = 0;
  std::chrono::steady_clock::time_point heartbeat_moved_{};
};

}  // namespace korovod::sidecar
