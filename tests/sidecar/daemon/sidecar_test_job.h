// The harness of the korovod-sidecar integration tests: real sidecar processes started with
// korovodrun's environment contract (launcher/README.md), trainers as forked processes
// that report failures by exit status (gtest assertions do not cross fork).
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "korovod/sidecar/v1/sidecar.grpc.pb.h"

namespace korovod::sidecar::daemon_test {

// In forked trainers: report and exit non-zero.
#define TCHECK(cond)                                                                      \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "trainer %d: %s:%d: check failed: %s\n", ::getpid(), __FILE__, \
                   __LINE__, #cond);                                                      \
      std::_Exit(1);                                                                      \
    }                                                                                     \
  } while (0)
#define TOK(expr)                                                                                \
  do {                                                                                           \
    const ::korovod::Status _s = (expr);                                                         \
    if (!_s.ok()) {                                                                              \
      std::fprintf(stderr, "trainer %d: %s:%d: %s: %s\n", ::getpid(), __FILE__, __LINE__, #expr, \
                   _s.ToString().c_str());                                                       \
      std::_Exit(1);                                                                             \
    }                                                                                            \
  } while (0)
// In forked trainers: `text` contains `part`, else report both and exit non-zero.
#define TCONTAINS(text, part)                                                              \
  do {                                                                                     \
    const std::string _t = (text);                                                         \
    if (_t.find(part) == std::string::npos) {                                              \
      std::fprintf(stderr, "trainer %d: %s:%d: \"%s\" not in: %s\n", ::getpid(), __FILE__, \
                   __LINE__, std::string(part).c_str(), _t.c_str());                       \
      std::_Exit(1);                                                                       \
    }                                                                                      \
  } while (0)

// In forked trainers: the value, or report and exit non-zero.
template <typename T>
T Must(StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "trainer %d: %s\n", ::getpid(), v.status().ToString().c_str());
    std::_Exit(1);
  }
  return std::move(v).value();
}

// The korovod-sidecar binary under test.
const char* SidecarBinary();

// A TCP socket listening on 127.0.0.1 at a kernel-chosen port (*port); -1 on failure.
int ListenOnLoopback(int* port);
// A loopback port nobody listens on right now (someone else may bind it before the caller does:
// for addresses that must be known before a process starts).
int FreePort();
// The health/metrics port that rank `rank` of `size` reports on its start-up line in the sidecar
// log at `log_path` (run with KOROVOD_METRICS_PORT=0); -1 when the line does not appear in 10 s.
int ReportedMetricsPort(const std::string& log_path, int rank, int size);
// GET http://127.0.0.1:port/path (HTTP/1.0); the raw response, *status its code (0: none).
std::string HttpGet(int port, const std::string& path, int* status);

// Hello, speaking protocol `version`, to the sidecar at `socket` (10 s deadline). gRPC in forked
// trainers only: the test process must not initialise gRPC before it forks.
grpc::Status CallHello(const std::string& socket, uint32_t version, v1::HelloReply* reply);

// Runs `binary` with exactly `env` (stderr to `log`) until it exits; its wait status, or -1 when it
// is still running after `timeout` (then killed). For sidecars that must refuse to start.
int RunToExit(const char* binary, const std::vector<std::string>& env, const std::string& log,
              std::chrono::milliseconds timeout);

// A job of `n` sidecars on this host, each with its own socket, arena prefix, metrics port and
// log. Destruction: SIGTERM to every sidecar still running, which must exit 0 within 10 s, leave
// no socket behind and nothing of the job in /dev/shm (test failures otherwise).
class Job {
 public:
  // `extra_env`: more KEY=value settings for every sidecar (engine settings, ...).
  // `ranks_per_sidecar` > 1: n / ranks_per_sidecar sidecars, each serving that many consecutive
  // ranks (KOROVOD_SIDECAR_RANKS, as in a pod of several ranks); pid/Log/Running/ExitsCleanly
  // then take the sidecar's index, socket() still the rank.
  // `binary`: the sidecar program (null: SidecarBinary()).
  explicit Job(int n, std::vector<std::string> extra_env = {}, int ranks_per_sidecar = 1,
               const char* binary = nullptr);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  static bool WaitPid(pid_t pid, std::chrono::milliseconds timeout, int* st);

  // Waits for every sidecar's socket (korovodrun's readiness signal).
  ::testing::AssertionResult WaitReady();
  // Runs `trainer(rank)` in one forked process per rank; success if all exit 0 within 30 s.
  ::testing::AssertionResult RunTrainers(const std::function<void(int)>& trainer);
  // Waits for sidecar r to exit on its own; true with exit status 0.
  bool ExitsCleanly(int r, std::chrono::milliseconds timeout);
  // Sidecar r has not exited.
  bool Running(int r);

  int size() const { return n_; }
  std::string socket(int r) const {
    if (per_ == 1) return dir_ + "/rank" + std::to_string(r) + ".sock";
    return dir_ + "/s" + std::to_string(r / per_) + "-rank" + std::to_string(r % per_) + ".sock";
  }
  const std::string& dir() const { return dir_; }
  // Rank r's health/metrics port. Every sidecar binds an ephemeral one (KOROVOD_METRICS_PORT=0)
  // and logs it: a free port picked here and bound later could be taken in between.
  int metrics_port(int r) const;
  pid_t pid(int r) const { return pids_[r]; }
  std::string Log(int r) const;

 private:
  int n_;
  int per_ = 1;
  std::string dir_;
  std::string prefix_;
  std::string key_file_;
  std::vector<pid_t> pids_;
};

}  // namespace korovod::sidecar::daemon_test
