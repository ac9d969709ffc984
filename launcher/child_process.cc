#include "launcher/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/fd.h"

namespace korovod::launcher {

ExitStatus ExitStatus::FromWaitStatus(int wstatus) {
  ExitStatus s;
  if (WIFSIGNALED(wstatus)) {
    s.signaled = true;
    s.signal = WTERMSIG(wstatus);
  } else {
    s.code = WEXITSTATUS(wstatus);
  }
  return s;
}

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev == nullptr) return "signal " + std::to_string(sig);
  return std::string("SIG") + abbrev;
}

std::string ExitStatus::Describe() const {
  if (signaled) {
    return "was killed by signal " + std::to_string(signal) + " (" + SignalName(signal) + ")";
  }
  return "exited with code " + std::to_string(code);
}

namespace {

// Reports errno to the parent over the exec-report pipe and ends the child.
[[noreturn]] void FailInChild(int report_fd, int err) {
  while (::write(report_fd, &err, sizeof err) < 0 && errno == EINTR) {
  }
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ExecChild(const ChildSpec& spec, char* const* argv, char* const* envp,
                            int report_fd, const sigset_t& old_mask, pid_t parent) {
  auto fail = [report_fd](int e) { FailInChild(report_fd, e); };
  if (spec.new_process_group && ::setpgid(0, 0) != 0) fail(errno);
  if (spec.die_with_parent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
    if (::getppid() != parent) ::_exit(127);  // the parent is already gone
  }
  const int sources[3] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd};
  for (int target = 0; target < 3; ++target) {
    int src = sources[target];
    if (src < 0) continue;
    if (src == target) {
      if (::fcntl(target, F_SETFD, 0) != 0) fail(errno);
    } else if (::dup2(src, target) < 0) {
      fail(errno);
    }
  }
  for (int fd : spec.inherit_fds) {
    if (::fcntl(fd, F_SETFD, 0) != 0) fail(errno);
  }
  // Handlers installed by the launcher must not run here; ignored SIGPIPE must not leak into the
  // command. exec resets caught signals itself, but only at exec.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    bool caught =
        !(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN;
    if ((old.sa_flags & SA_SIGINFO) || caught || (sig == SIGPIPE && old.sa_handler == SIG_IGN)) {
      struct sigaction dfl;
      ::memset(&dfl, 0, sizeof dfl);
      dfl.sa_handler = SIG_DFL;
      ::sigaction(sig, &dfl, nullptr);
    }
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::execvpe(argv[0], argv, envp);
  FailInChild(report_fd, errno);
}

}  // namespace

StatusOr<ChildProcess> ChildProcess::Start(const ChildSpec& spec) {
  if (spec.argv.empty()) return InvalidArgument("no program to start");
  // Everything the child needs is allocated before fork.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return ErrnoStatus(StatusCode::kInternal, "pipe2", errno);
  Fd report_read(report[0]);
  Fd report_write(report[1]);

  sigset_t all, old_mask;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old_mask);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) ExecChild(spec, argv.data(), envp.data(), report_write.get(), old_mask, parent);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) return ErrnoStatus(StatusCode::kUnavailable, "fork", fork_errno);

  ChildProcess child(pid, spec.new_process_group);
  if (spec.new_process_group) ::setpgid(pid, pid);  // also here: no race with early signals
  report_write.Reset();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report_read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    child.Wait();
    return ErrnoStatus(StatusCode::kFailedPrecondition, "cannot execute '" + spec.argv[0] + "'",
                       child_errno);
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), group_(o.group_), exit_(std::exchange(o.exit_, {})) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    KillAndReap();
    pid_ = std::exchange(o.pid_, -1);
    group_ = o.group_;
    exit_ = std::exchange(o.exit_, {});
  }
  return *this;
}

ChildProcess::~ChildProcess() { KillAndReap(); }

void ChildProcess::KillAndReap() {
  if (running()) {
    Signal(SIGKILL);
    Wait();
  }
}

std::optional<ExitStatus> ChildProcess::Poll() {
  if (pid_ <= 0 || exit_) return exit_;
  int wstatus = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &wstatus, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exit_ = ExitStatus::FromWaitStatus(wstatus);
  } else if (r < 0) {
    exit_ = ExitStatus{.signaled = false, .code = 255, .signal = 0};  // ECHILD: reaped elsewhere
  }
  return exit_;
}

ExitStatus ChildProcess::Wait() {
  if (exit_) return *exit_;
  int wstatus = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &wstatus, 0);
  } while (r < 0 && errno == EINTR);
  exit_ = r == pid_ ? ExitStatus::FromWaitStatus(wstatus)
                    : ExitStatus{.signaled = false, .code = 255, .signal = 0};
  return *exit_;
}

void ChildProcess::Signal(int sig) {
  if (pid_ <= 0) return;
  if (group_) {
    ::kill(-pid_, sig);
  } else if (running()) {
    ::kill(pid_, sig);
  }
}

}  // namespace korovod::launcher
