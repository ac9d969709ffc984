// POSIX shared memory: ShmSegment owns a named object in /dev/shm (its descriptor, and its name
// while this process is responsible for removing it), ShmMapping owns one mmap of it. The one
// shm_open/mmap helper of the project: the shm transport's rings and the sidecar's arena both
// sit on it, so creation, sizing, cleanup on failure and error messages are written once.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace korovod {

// One MAP_SHARED, read-write mapping; unmapped on destruction. Move-only.
class ShmMapping {
 public:
  ShmMapping() = default;
  ~ShmMapping() { Reset(); }
  ShmMapping(ShmMapping&& o) noexcept;
  ShmMapping& operator=(ShmMapping&& o) noexcept;
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool valid() const { return data_ != nullptr; }
  void Reset();

 private:
  friend class ShmSegment;
  ShmMapping(std::byte* data, size_t size) : data_(data), size_(size) {}
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

class ShmSegment {
 public:
  // Creates `name` ("/" then up to 254 characters without "/"), failing if it exists, with
  // exactly `mode` (shm_open's mode is filtered by the umask, so it is set again with fchmod) and
  // `bytes` long (no pages allocated: see Allocate). Nothing is left in /dev/shm if this fails;
  // the segment then owns the name: its destructor unlinks it unless Unlink() or KeepName() ran.
  // `error_number`, when given, receives the errno of a failure (0 on success), so a caller can
  // explain the usual causes (EEXIST: a stale segment) in its own words.
  static StatusOr<ShmSegment> Create(const std::string& name, uint64_t bytes, mode_t mode,
                                     int* error_number = nullptr);
  // Opens an existing `name` read-write. The name stays its creator's to remove.
  static StatusOr<ShmSegment> Open(const std::string& name, int* error_number = nullptr);

  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // The object's current size (fstat).
  StatusOr<uint64_t> Size() const;
  // Backs [offset, offset + bytes) with pages now (posix_fallocate), so that touching them later
  // cannot SIGBUS when /dev/shm is full; pages already there are kept.
  Status Allocate(uint64_t offset, uint64_t bytes) const;
  // Maps the first `bytes`. `reserve_swap` false adds MAP_NORESERVE (address space only, for
  // regions that grow through Allocate).
  StatusOr<ShmMapping> Map(size_t bytes, bool reserve_swap = true) const;

  // Removes the name from /dev/shm now; mappings and the descriptor stay valid. Either way the
  // destructor no longer unlinks.
  Status Unlink();
  // Leaves the name in place on destruction (someone else removes it).
  void KeepName() { owns_name_ = false; }

  const std::string& name() const { return name_; }
  bool owns_name() const { return owns_name_; }
  int fd() const { return fd_.get(); }

 private:
  ShmSegment(std::string name, Fd fd, bool owns_name)
      : name_(std::move(name)), fd_(std::move(fd)), owns_name_(owns_name) {}
  std::string name_;
  Fd fd_;
  bool owns_name_ = false;
};

// The names ("/name", as shm_open takes them) of the shared-memory objects in /dev/shm that start
// with `prefix` ("/" then the start of a name; "" or "/" lists them all), sorted. For sweeping
// what killed processes left behind: the launcher's job prefix, the benchmark's orphans.
std::vector<std::string> ListShmNames(std::string_view prefix);

}  // namespace korovod
