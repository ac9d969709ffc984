#include "common/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <utility>

namespace korovod {
namespace {

Status CheckName(const std::string& name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || name.find('\0') != std::string::npos) {
    return InvalidArgument("\"" + name +
                           "\" is not a POSIX shared memory name: \"/\" followed by 1-254 "
                           "characters without \"/\"");
  }
  return OkStatus();
}

// The status of a failed call on `name`; the code says whether retrying or fixing permissions
// can help.
Status ShmError(const char* call, const std::string& name, int err, int* error_number) {
  if (error_number != nullptr) *error_number = err;
  const StatusCode code = (err == EACCES || err == EPERM) ? StatusCode::kPermissionDenied
                          : err == EEXIST                 ? StatusCode::kFailedPrecondition
                                                          : StatusCode::kUnavailable;
  return ErrnoStatus(code, std::string(call) + " " + name, err);
}

}  // namespace

ShmMapping::ShmMapping(ShmMapping&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

ShmMapping& ShmMapping::operator=(ShmMapping&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void ShmMapping::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

StatusOr<ShmSegment> ShmSegment::Create(const std::string& name, uint64_t bytes, mode_t mode,
                                        int* error_number) {
  if (error_number != nullptr) *error_number = 0;
  KV_RETURN_IF_ERROR(CheckName(name));
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd.valid()) return ShmError("shm_open (create)", name, errno, error_number);
  // Owns the name from here: returning early unlinks it.
  ShmSegment segment(name, std::move(fd), /*owns_name=*/true);
  if (::fchmod(segment.fd(), mode) != 0) return ShmError("fchmod", name, errno, error_number);
  if (::ftruncate(segment.fd(), static_cast<off_t>(bytes)) != 0) {
    return ShmError("ftruncate", name, errno, error_number);
  }
  return segment;
}

StatusOr<ShmSegment> ShmSegment::Open(const std::string& name, int* error_number) {
  if (error_number != nullptr) *error_number = 0;
  KV_RETURN_IF_ERROR(CheckName(name));
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) return ShmError("shm_open", name, errno, error_number);
  return ShmSegment(name, std::move(fd), /*owns_name=*/false);
}

ShmSegment::~ShmSegment() {
  if (owns_name_) ::shm_unlink(name_.c_str());
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : name_(std::move(o.name_)),
      fd_(std::move(o.fd_)),
      owns_name_(std::exchange(o.owns_name_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    if (owns_name_) ::shm_unlink(name_.c_str());
    name_ = std::move(o.name_);
    fd_ = std::move(o.fd_);
    owns_name_ = std::exchange(o.owns_name_, false);
  }
  return *this;
}

StatusOr<uint64_t> ShmSegment::Size() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) return ShmError("fstat", name_, errno, nullptr);
  return static_cast<uint64_t>(st.st_size);
}

Status ShmSegment::Allocate(uint64_t offset, uint64_t bytes) const {
  // posix_fallocate returns the error instead of setting errno.
  const int err =
      ::posix_fallocate(fd_.get(), static_cast<off_t>(offset), static_cast<off_t>(bytes));
  if (err != 0) return ShmError("posix_fallocate", name_, err, nullptr);
  return OkStatus();
}

StatusOr<ShmMapping> ShmSegment::Map(size_t bytes, bool reserve_swap) const {
  const int flags = MAP_SHARED | (reserve_swap ? 0 : MAP_NORESERVE);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd_.get(), 0);
  if (base == MAP_FAILED) {
    return ShmError(("mmap of " + std::to_string(bytes) + " bytes of").c_str(), name_, errno,
                    nullptr);
  }
  return ShmMapping(static_cast<std::byte*>(base), bytes);
}

std::vector<std::string> ListShmNames(std::string_view prefix) {
  // glibc keeps shm_open's "/name" as /dev/shm/name.
  if (!prefix.empty() && prefix.front() == '/') prefix.remove_prefix(1);
  std::vector<std::string> names;
  struct DirCloser {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, DirCloser> dir(::opendir("/dev/shm"));
  if (!dir) return names;
  while (const dirent* e = ::readdir(dir.get())) {
    const std::string_view name(e->d_name);
    if (name == "." || name == ".." || !name.starts_with(prefix)) continue;
    names.push_back("/" + std::string(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

Status ShmSegment::Unlink() {
  owns_name_ = false;
  if (::shm_unlink(name_.c_str()) != 0) return ShmError("shm_unlink", name_, errno, nullptr);
  return OkStatus();
}

}  // namespace korovod
