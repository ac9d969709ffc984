#include "launcher/fd_writer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace korovod::launcher {

void FdWriter::Line(std::string_view prefix, std::string_view line) {
  if (broken_) return;
  buf_.append(prefix);
  buf_.append(line);
  buf_.push_back('\n');
  if (buf_.size() >= 64 * 1024) Flush();
}

void FdWriter::Flush() {
  size_t done = 0;
  while (!broken_ && done < buf_.size()) {
    ssize_t n = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (n >= 0) {
      done += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd_, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else if (errno != EINTR) {
      broken_ = true;  // EPIPE, EBADF...: the reader is gone; keep supervising regardless
    }
  }
  buf_.clear();
}

}  // namespace korovod::launcher
