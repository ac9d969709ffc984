#include "bench/result_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace korovod::bench {

StatusOr<ResultFile> ResultFile::Create(const char* name) {
  const int fd = ::memfd_create(name, 0);
  if (fd < 0) return ErrnoStatus(StatusCode::kInternal, "memfd_create", errno);
  return ResultFile(fd);
}

Status ResultFile::AppendLine(const std::string& line) const {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(StatusCode::kInternal, "write to the result file", errno);
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

StatusOr<std::string> ResultFile::ReadAll() const {
  std::string out;
  char buf[1 << 16];
  off_t at = 0;
  while (true) {
    const ssize_t n = ::pread(fd_.get(), buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(StatusCode::kInternal, "read the result file", errno);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

Status ResultFile::Clear() const {
  if (::ftruncate(fd_.get(), 0) != 0 || ::lseek(fd_.get(), 0, SEEK_SET) < 0) {
    return ErrnoStatus(StatusCode::kInternal, "truncate the result file", errno);
  }
  return OkStatus();
}

}  // namespace korovod::bench
