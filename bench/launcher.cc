#include "bench/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/log.h"

namespace korovod::bench {
namespace {

std::string ErrnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A listening TCP socket on 127.0.0.1 with a kernel-chosen port.
bool ListenLoopback(Fd* out, uint16_t* port, std::string* error) {
  Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  if (fd.get() < 0) {
    *error = ErrnoText("socket");
    return false;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *error = ErrnoText("bind 127.0.0.1:0");
    return false;
  }
  // Backlog covers every peer's striped TCP streams dialling at once.
  if (::listen(fd.get(), 1024) != 0) {
    *error = ErrnoText("listen");
    return false;
  }
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *error = ErrnoText("getsockname");
    return false;
  }
  *port = ntohs(addr.sin_port);
  *out = std::move(fd);
  return true;
}

// SIGCHLD stays blocked while the children run so the parent can sleep in sigtimedwait() until
// one exits or the deadline passes, instead of polling. SIGINT, SIGTERM and SIGHUP are taken the
// same way, so an interrupted parent kills its ranks (and its caller its sidecars and their
// files) before it goes. Restored on every return path.
class ScopedBlockSignals {
 public:
  ScopedBlockSignals() {
    sigemptyset(&set_);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, sig);
    sigprocmask(SIG_BLOCK, &set_, &old_);
  }
  ~ScopedBlockSignals() { sigprocmask(SIG_SETMASK, &old_, nullptr); }
  ScopedBlockSignals(const ScopedBlockSignals&) = delete;
  ScopedBlockSignals& operator=(const ScopedBlockSignals&) = delete;

  const sigset_t& set() const { return set_; }
  const sigset_t& old() const { return old_; }

 private:
  sigset_t set_;
  sigset_t old_;
};

// Field 3 of /proc/PID/stat (R running, S sleeping, D disk, T stopped, Z zombie).
std::string ProcState(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "?";
  return stat.substr(paren + 2, 1);
}

std::string DescribeStatus(int rank, int status) {
  if (WIFEXITED(status)) {
    return "rank " + std::to_string(rank) + " exited with status " +
           std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(sig) + " (" +
           strsignal(sig) + ")";
  }
  return "rank " + std::to_string(rank) + " ended with wait status " + std::to_string(status);
}

// The children of one launch; kills and reaps whatever is still running when destroyed, so no
// return path leaves a rank behind.
class Children {
 public:
  explicit Children(int n) : pids_(n, -1) {}
  ~Children() { KillAll(); }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  void Set(int rank, pid_t pid) {
    pids_[rank] = pid;
    ++running_;
  }
  int running() const { return running_; }

  // Reaps every child that has ended; appends (rank, wait status) pairs.
  void ReapExited(std::vector<std::pair<int, int>>* ended) {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] < 0) continue;
      int status = 0;
      pid_t p = ::waitpid(pids_[r], &status, WNOHANG);
      if (p == pids_[r]) {
        pids_[r] = -1;
        --running_;
        ended->emplace_back(static_cast<int>(r), status);
      }
    }
  }

  // "rank 0 (S), rank 2 (T)": the scheduler state from /proc tells a rank stopped or spinning
  // (T, R) from ranks blocked waiting on it (S), which usually points at the culprit.
  std::string DescribeRunning() const {
    std::string out;
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] < 0) continue;
      if (!out.empty()) out += ", ";
      out += "rank " + std::to_string(r) + " (" + ProcState(pids_[r]) + ")";
    }
    return out;
  }

  // Only our own children, by pid.
  void KillAll() {
    for (pid_t& pid : pids_) {
      if (pid < 0) continue;
      ::kill(pid, SIGKILL);
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      pid = -1;
      --running_;
    }
  }

 private:
  std::vector<pid_t> pids_;
  int running_ = 0;
};

[[noreturn]] void ChildMain(int rank, const sigset_t& old_mask, pid_t parent, std::vector<Fd>& fds,
                            const std::vector<PeerAddress>& peers, const RankBody& body) {
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  // If the parent dies (killed by a harness timeout), the ranks must not linger spinning on
  // shared memory; the getppid() check closes the race with a parent that died before prctl.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kExitRankFailed);
  for (int j = 0; j < static_cast<int>(fds.size()); ++j) {
    if (j != rank) fds[j].Reset();
  }
  int code = kExitRankFailed;
  try {
    code = body(rank, fds[rank].release(), peers);
  } catch (const std::exception& e) {
    KV_LOG(kError, kBench, "rank %d: exception: %s", rank, e.what());
  }
  std::fflush(nullptr);
  // _exit: the parent's atexit handlers and static destructors belong to the parent.
  _exit(code);
}

}  // namespace

LaunchOutcome LaunchRanks(int n, double timeout_s, const RankBody& body, const LaunchWatch& watch) {
  std::vector<Fd> fds(n);
  std::vector<PeerAddress> peers(n);
  for (int r = 0; r < n; ++r) {
    std::string error;
    if (!ListenLoopback(&fds[r], &peers[r].port, &error)) {
      return {kExitRankFailed,
              "cannot pre-bind a socket for rank " + std::to_string(r) + ": " + error};
    }
    peers[r].host = "127.0.0.1";
  }

  ScopedBlockSignals block;
  // Buffered output would otherwise be written once by the parent and once by every child.
  std::fflush(nullptr);
  const pid_t parent = getpid();
  Children children(n);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      return {kExitRankFailed, "fork for rank " + std::to_string(r) + ": " + std::strerror(errno)};
    }
    if (pid == 0) ChildMain(r, block.old(), parent, fds, peers, body);
    children.Set(r, pid);
  }
  fds.clear();  // the children own the listening sockets now

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  bool verify_failed = false;
  while (children.running() > 0) {
    std::vector<std::pair<int, int>> ended;
    children.ReapExited(&ended);
    std::string failures;
    for (auto [rank, status] : ended) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == kExitOk) continue;
      if (WIFEXITED(status) && WEXITSTATUS(status) == kExitVerifyFailed) {
        verify_failed = true;
        continue;
      }
      failures += (failures.empty() ? "" : "; ") + DescribeStatus(rank, status);
    }
    const std::string watched = watch ? watch() : std::string();
    if (!failures.empty() || !watched.empty()) {
      children.KillAll();
      if (!failures.empty()) failures += " (remaining ranks killed)";
      if (!watched.empty()) failures += (failures.empty() ? "" : "; ") + watched;
      return {kExitRankFailed, failures};
    }
    if (children.running() == 0) break;

    const auto now = Clock::now();
    if (now >= deadline) {
      const std::string hung = children.DescribeRunning();
      children.KillAll();
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.0f", timeout_s);
      return {kExitRankFailed, "still running after the " + std::string(secs) +
                                   " s deadline: " + hung +
                                   " [state R running, S sleeping, T stopped]; all ranks killed "
                                   "(--timeout to extend)"};
    }
    // Wake on SIGCHLD, and at least every second in case a SIGCHLD was merged with one that was
    // already consumed by an earlier wait.
    const auto left = std::min<Clock::duration>(deadline - now, std::chrono::seconds(1));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    const int sig = sigtimedwait(&block.set(), nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      children.KillAll();
      return {kExitRankFailed,
              std::string("interrupted by SIG") + sigabbrev_np(sig) + "; all ranks killed", sig};
    }
  }
  return {verify_failed ? kExitVerifyFailed : kExitOk, ""};
}

}  // namespace korovod::bench
