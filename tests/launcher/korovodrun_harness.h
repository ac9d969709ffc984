// Runs korovodrun as a child process in a test: private TMPDIR (the run directory must be gone
// afterwards), a report directory for fake-sidecar, both output streams captured.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/child_process.h"
#include "common/fd.h"

namespace korovod::launcher::testing {

struct LaunchResult {
  ExitStatus status;
  std::string out;  // korovodrun's stdout
  std::string err;  // korovodrun's stderr
  double seconds = 0;
};

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One running korovodrun.
std::string KorovodrunPath();

class RunningLauncher {
 public:
  // Starts `program` (korovodrun by default) with `args`; `env` is added to this environment.
  RunningLauncher(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env,
                  const std::string& program = KorovodrunPath());
  pid_t pid() const { return child_->pid(); }
  // Reads output until `done()` holds or `timeout_s` passes; false on timeout.
  template <typename F>
  bool WaitUntil(F done, double timeout_s);
  // Reads output until korovodrun exits (SIGKILLed after `timeout_s`, which fails the test).
  LaunchResult Finish(double timeout_s = 20);

 private:
  void PumpOnce(int timeout_ms);
  std::optional<ChildProcess> child_;
  Fd out_, err_;
  std::string out_text_, err_text_;
  double started_;
};

double NowSeconds();

template <typename F>
bool RunningLauncher::WaitUntil(F done, double timeout_s) {
  double end = NowSeconds() + timeout_s;
  while (!done()) {
    if (NowSeconds() > end) return false;
    PumpOnce(20);
  }
  return true;
}

// Paths of the binaries under test.
std::string KorovodrunPath();
std::string FakeSidecarPath();

// /dev/shm entries whose name starts with `prefix` (the "/korovod-<job>-" form).
std::vector<std::string> ShmEntriesWithPrefix(const std::string& prefix);
// The entries of a directory (no "." and "..").
std::vector<std::string> ListDir(const std::string& dir);
// KEY=value lines of a file.
std::map<std::string, std::string> ReadEnvFile(const std::string& path);
// Whether `pid` is alive (a zombie counts as gone).
bool ProcessExists(pid_t pid);

}  // namespace korovod::launcher::testing
