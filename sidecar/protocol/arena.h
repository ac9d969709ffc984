// Arena: one mapping of the shared-memory arena (arena_layout.h). The sidecar creates it (POSIX
// shm, mode 0660, reserved up front), the trainer opens it by name and gets a clear error when the
// bytes are not an arena or speak another protocol version. One client session per arena.
//
// Trust: the sidecar never re-reads the layout from shared memory (layout() is a private copy
// checked at Open/computed at Create), so a client scribbling on the header cannot move the
// sidecar's view of the regions.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "runtime/common/status.h"
#include "sidecar/protocol/arena_layout.h"

namespace korovod::sidecar {

enum class ArenaSide { kSidecar, kClient };

class Arena {
 public:
  // Sidecar side. `name` is a POSIX shm name: "/" followed by 1-254 characters, no other "/".
  // Fails (naming the arena) if it exists, or if /dev/shm cannot hold it.
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

  // The other side's liveness word (a process that was killed leaves it set: pair this with the
  // gRPC session for death detection).
  bool peer_alive();
  // Sidecar: forgets a client that went away without detaching, so a new one may Open.
  void ReleaseClient();

 private:
  struct Key {};  // only Create/Open construct

 public:
  Arena(Key, std::string name, ArenaSide side, std::byte* base, size_t bytes);

 private:
  std::string name_;
  ArenaSide side_;
  std::byte* base_;
  size_t mapped_bytes_;
  ArenaLayout layout_;
  bool attached_ = false;  // fully created/opened: the destructor updates the header
  bool unlink_on_destroy_ = false;
};

}  // namespace korovod::sidecar
