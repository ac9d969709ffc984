// SignalPipe: turns SIGCHLD, SIGINT, SIGTERM and SIGHUP into bytes on a non-blocking pipe that the
// supervision loop polls (the self-pipe trick), and ignores SIGPIPE. Restores the previous
// dispositions on destruction. One instance per process.
#pragma once

#include <signal.h>

#include <memory>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/fd.h"

namespace korovod::launcher {

class SignalPipe {
 public:
  static StatusOr<std::unique_ptr<SignalPipe>> Install();

  struct Token {  // only Install() makes one
   private:
    Token() = default;
    friend class SignalPipe;
  };
  explicit SignalPipe(Token) {}
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Poll this for POLLIN.
  int read_fd() const { return read_.get(); }
  // The signals received since the last call, in order (SIGCHLD included).
  std::vector<int> Drain();

 private:
  Fd read_;
  Fd write_;
  std::vector<std::pair<int, struct sigaction>> saved_;
};

}  // namespace korovod::launcher
