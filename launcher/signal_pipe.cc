#include "launcher/signal_pipe.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace korovod::launcher {
namespace {

std::atomic<int> g_write_fd{-1};

void OnSignal(int sig) {
  int saved = errno;
  int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    unsigned char b = static_cast<unsigned char>(sig);
    (void)!::write(fd, &b, 1);  // a full pipe already holds a wake-up
  }
  errno = saved;
}

}  // namespace

StatusOr<std::unique_ptr<SignalPipe>> SignalPipe::Install() {
  if (g_write_fd.load() >= 0) return FailedPrecondition("signal pipe already installed");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "pipe2", errno);
  }
  auto p = std::make_unique<SignalPipe>(Token());
  p->read_ = Fd(fds[0]);
  p->write_ = Fd(fds[1]);
  g_write_fd.store(fds[1]);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    struct sigaction sa;
    ::memset(&sa, 0, sizeof sa);
    ::sigemptyset(&sa.sa_mask);
    sa.sa_handler = sig == SIGPIPE ? SIG_IGN : OnSignal;
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    struct sigaction old;
    if (::sigaction(sig, &sa, &old) != 0) {
      return ErrnoStatus(StatusCode::kInternal, "sigaction", errno);
    }
    p->saved_.emplace_back(sig, old);
  }
  return p;
}

SignalPipe::~SignalPipe() {
  for (auto& [sig, old] : saved_) ::sigaction(sig, &old, nullptr);
  g_write_fd.store(-1);
}

std::vector<int> SignalPipe::Drain() {
  std::vector<int> sigs;
  unsigned char buf[64];
  while (true) {
    ssize_t n = ::read(read_.get(), buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    for (ssize_t i = 0; i < n; ++i) sigs.push_back(buf[i]);
  }
  return sigs;
}

}  // namespace korovod::launcher
