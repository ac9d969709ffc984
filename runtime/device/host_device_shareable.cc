// HostDeviceApi's allocations that cross as file descriptors: a memfd per allocation, exported by
// dup, imported by mapping the pieces back to back in one reserved range (as cuMemAddressReserve
// and cuMemMap do). The importer trusts nothing of the descriptor but what fstat shows.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/device/host_device_api.h"

namespace korovod {
namespace {

Status Errno(const std::string& what) { return Internal(what + ": " + std::strerror(errno)); }

}  // namespace

HostDeviceApi::Mapped::~Mapped() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

HostDeviceApi::Mapped::Mapped(Mapped&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

size_t HostDeviceApi::ShareableGranularity() {
  return static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

StatusOr<void*> HostDeviceApi::MallocShareable(int device, size_t bytes) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  const size_t g = ShareableGranularity();
  const size_t size = bytes == 0 ? g : (bytes + g - 1) / g * g;
  Fd memfd(::memfd_create("korovod-host-device", MFD_CLOEXEC));
  if (!memfd.valid()) return Errno("memfd_create");
  if (::ftruncate(memfd.get(), static_cast<off_t>(size)) != 0) return Errno("ftruncate");
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (p == MAP_FAILED) return Errno("mmap of a shareable host-device allocation");
  auto* base = static_cast<std::byte*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  shareable_.emplace(base, ShareableAllocation{device, std::move(memfd), Mapped(base, size)});
  return p;
}

StatusOr<ShareableExport> HostDeviceApi::ExportShareable(void* ptr) {
  auto* p = static_cast<std::byte*>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [base, a] : shareable_) {
    if (p >= base && p < base + a.mapping.bytes()) {
      ShareableExport e;
      e.fd = Fd(::fcntl(a.memfd.get(), F_DUPFD_CLOEXEC, 0));
      if (!e.fd.valid()) return Errno("duplicating a shareable allocation's descriptor");
      e.base = reinterpret_cast<uint64_t>(base);
      e.bytes = a.mapping.bytes();
      return e;
    }
  }
  return FailedPrecondition(
      "pointer is not in a shareable device allocation of this process (made without the file "
      "descriptor handle type)");
}

StatusOr<void*> HostDeviceApi::ImportShareable(int device, std::span<const ShareableChunk> chunks) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  if (chunks.empty()) return InvalidArgument("no pieces to import");
  const uint64_t g = ShareableGranularity();
  uint64_t total = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ShareableChunk& c = chunks[i];
    const std::string piece = "piece " + std::to_string(i) + " of " + std::to_string(chunks.size());
    struct stat st {};
    if (::fstat(c.fd, &st) != 0) return Errno(piece + ": fstat of its descriptor");
    // A memfd is a regular file; a socket, pipe or device node is not memory we map.
    if (!S_ISREG(st.st_mode)) {
      return InvalidArgument(piece + ": its descriptor is not a memory file");
    }
    if (c.bytes == 0 || c.bytes % g != 0) {
      return InvalidArgument(piece + ": " + std::to_string(c.bytes) +
                             " bytes is not a positive multiple of the granularity " +
                             std::to_string(g));
    }
    if (static_cast<uint64_t>(st.st_size) < c.bytes) {
      return InvalidArgument(piece + " claims " + std::to_string(c.bytes) +
                             " bytes, its memory has " + std::to_string(st.st_size));
    }
    if (total + c.bytes < total) return InvalidArgument("pieces overflow the address space");
    total += c.bytes;
  }
  // Reserve first, then map each piece at its place inside the reservation.
  void* r = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return Errno("reserving " + std::to_string(total) + " bytes");
  Mapped range(static_cast<std::byte*>(r), total);
  uint64_t at = 0;
  for (const ShareableChunk& c : chunks) {
    void* p =
        ::mmap(range.base() + at, c.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, c.fd, 0);
    if (p == MAP_FAILED) return Errno("mapping a piece of " + std::to_string(c.bytes) + " bytes");
    at += c.bytes;
  }
  std::byte* base = range.base();
  std::lock_guard<std::mutex> lock(mu_);
  shareable_imports_.emplace(base, std::move(range));
  return static_cast<void*>(base);
}

Status HostDeviceApi::CloseShareable(int, void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shareable_imports_.erase(static_cast<std::byte*>(base)) == 0) {
    return InvalidArgument("no allocation imported by descriptor at this address");
  }
  return OkStatus();
}

}  // namespace korovod
