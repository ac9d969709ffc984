// ChildProcess: one fork/exec'd child in its own process group, with chosen stdio, environment and
// inherited fds. Owns the child: destruction SIGKILLs its group and reaps it if still running.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace korovod::launcher {

// How a child ended (from waitpid).
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled

  static ExitStatus FromWaitStatus(int wstatus);
  bool success() const { return !signaled && code == 0; }
  // "exited with code 1" / "was killed by signal 9 (SIGKILL)".
  std::string Describe() const;
};

// "SIGKILL" for 9; "signal 64" for numbers without a name.
std::string SignalName(int sig);

struct ChildSpec {
  std::vector<std::string> argv;  // argv[0] without '/' is searched in PATH
  std::vector<std::string> env;   // "NAME=value" entries: the child's whole environment
  int stdin_fd = -1;              // dup2'd onto 0/1/2 in the child; -1 inherits ours
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::vector<int> inherit_fds;   // close-on-exec cleared for these, in this child only
  bool new_process_group = true;  // setpgid(0, 0): signals go to the child's whole group
  bool die_with_parent = false;   // PR_SET_PDEATHSIG SIGKILL: no orphan if the parent is killed
};

class ChildProcess {
 public:
  // Forks and execs. An exec failure (no such file, not executable) is reported here, naming
  // argv[0], and the half-started child is reaped.
  static StatusOr<ChildProcess> Start(const ChildSpec& spec);

  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_.has_value(); }
  const std::optional<ExitStatus>& exit_status() const { return exit_; }

  // Reaps the child if it has ended (waitpid WNOHANG); the exit status once it has.
  std::optional<ExitStatus> Poll();
  // Blocks until the child ends.
  ExitStatus Wait();
  // Sends `sig` to the child's process group (or the child alone without a group of its own).
  // After the child was reaped this still reaches what is left of its group (e.g. background
  // processes it started); harmless when the group is empty.
  void Signal(int sig);

 private:
  ChildProcess(pid_t pid, bool group) : pid_(pid), group_(group) {}
  void KillAndReap();

  pid_t pid_ = -1;
  bool group_ = true;
  std::optional<ExitStatus> exit_;
};

}  // namespace korovod::launcher
