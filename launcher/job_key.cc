#include "launcher/job_key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/fd.h"

namespace korovod::launcher {

StatusOr<std::string> RandomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(StatusCode::kInternal, "getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes * 2);
  for (unsigned char c : raw) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

Status WriteJobKeyFile(const std::string& path, const std::string& hex_key) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return ErrnoStatus(StatusCode::kUnavailable, "create " + path, errno);
  if (::fchmod(fd.get(), 0600) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "chmod 0600 " + path, errno);
  }
  std::string content = hex_key + "\n";
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(StatusCode::kUnavailable, "write " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

}  // namespace korovod::launcher
