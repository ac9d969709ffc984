#include "bench/sidecar_job.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "bench/bench_options.h"
#include "common/deadline.h"
#include "common/env_settings.h"
#include "common/fd.h"
#include "launcher/environment.h"
#include "launcher/job_key.h"
#include "launcher/listeners.h"

namespace korovod::bench {
namespace {

using launcher::ChildProcess;
using launcher::ExitStatus;

constexpr const char* kStem = "korovod-bench-";
// How often a pending socket (or a stopping sidecar) is looked at.
constexpr auto kPollInterval = std::chrono::milliseconds(10);
// Log lines quoted when a sidecar fails.
constexpr size_t kTailLines = 12;

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(std::llround(seconds * 1000)));
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The job's shared-memory names and run directory carry our pid, so what a run that was
// SIGKILLed left behind (nothing could clean up after it) is recognised by the next run.
std::string Tagged() { return std::string(kStem) + std::to_string(::getpid()) + "-"; }

std::string ShmPrefix() {
  auto hex = launcher::RandomHex(4);
  return "/" + Tagged() + (hex.ok() ? *hex : std::string("0")) + "-";
}

// True for "<kStem><pid>-..." of a pid that no longer exists.
bool IsOrphan(const std::string& name) {
  const std::string stem = kStem;
  if (name.compare(0, stem.size(), stem) != 0) return false;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + stem.size(), &end, 10);
  return pid > 0 && *end == '-' && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

std::vector<std::string> Orphans(const std::string& dir_path) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(dir_path.c_str())) {
    while (dirent* e = ::readdir(dir)) {
      if (IsOrphan(e->d_name)) names.push_back(e->d_name);
    }
    ::closedir(dir);
  }
  return names;
}

void SweepOrphans() {
  for (const std::string& name : Orphans("/dev/shm")) ::shm_unlink(("/" + name).c_str());
  const auto tmp = EnvSettings(ProcessGetenv(), logging::Subsystem::kBench).Find("TMPDIR");
  const std::string tmp_dir = tmp ? tmp->value : "/tmp";
  for (const std::string& name : Orphans(tmp_dir)) {
    std::error_code ignored;
    std::filesystem::remove_all(tmp_dir + "/" + name, ignored);
  }
}

}  // namespace

SidecarJob::SidecarJob(const SidecarJobOptions& options) : options_(options), shm_(ShmPrefix()) {}

// The sidecars (ChildProcess SIGKILLs and reaps), then the run directory, then the segments.
SidecarJob::~SidecarJob() = default;

StatusOr<std::unique_ptr<SidecarJob>> SidecarJob::Start(const SidecarJobOptions& options) {
  SweepOrphans();
  std::unique_ptr<SidecarJob> job(new SidecarJob(options));
  KV_RETURN_IF_ERROR(job->Launch());
  KV_RETURN_IF_ERROR(job->WaitForSockets());
  return job;
}

Status SidecarJob::Launch() {
  const int n = options_.ranks;
  KV_ASSIGN_OR_RETURN(launcher::RunDir dir, launcher::RunDir::Create(Tagged()));
  run_dir_.emplace(std::move(dir));
  const std::string key_file = run_dir_->path() + "/job.key";
  KV_ASSIGN_OR_RETURN(std::string key, launcher::RandomHex(32));
  KV_RETURN_IF_ERROR(launcher::WriteJobKeyFile(key_file, key));
  korovod::Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null.valid()) return ErrnoStatus(StatusCode::kInternal, "open /dev/null", errno);

  // Every listener is bound before any sidecar exists.
  std::vector<launcher::Listener> listeners;
  std::string peers;
  for (int r = 0; r < n; ++r) {
    const std::string host =
        options_.transport == TransportKind::kTcp
            ? "127.0." + std::to_string(r / 254) + "." + std::to_string(r % 254 + 1)
            : std::string("127.0.0.1");
    KV_ASSIGN_OR_RETURN(launcher::Listener l, launcher::BindListener(host));
    peers += (r == 0 ? "" : ",") + host + ":" + std::to_string(l.port);
    listeners.push_back(std::move(l));
  }

  sidecars_.resize(n);
  for (int r = 0; r < n; ++r) {
    Sidecar& s = sidecars_[r];
    s.socket = run_dir_->path() + "/rank" + std::to_string(r) + ".sock";
    s.log = run_dir_->path() + "/rank" + std::to_string(r) + ".log";
    korovod::Fd log(
        ::open(s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0600));
    if (!log.valid()) return ErrnoStatus(StatusCode::kInternal, "create " + s.log, errno);

    launcher::Environment env = launcher::Environment::FromCurrentProcess();
    // One machine, as korovodrun without -H: every rank local, one cross rank each.
    env.Set("KOROVOD_RANK", std::to_string(r));
    env.Set("KOROVOD_SIZE", std::to_string(n));
    env.Set("KOROVOD_LOCAL_RANK", std::to_string(r));
    env.Set("KOROVOD_LOCAL_SIZE", std::to_string(n));
    env.Set("KOROVOD_CROSS_RANK", "0");
    env.Set("KOROVOD_CROSS_SIZE", "1");
    env.Set("KOROVOD_LISTEN_FD", std::to_string(listeners[r].fd.get()));
    env.Set("KOROVOD_PEERS", peers);
    env.Set("KOROVOD_JOB_KEY_FILE", key_file);
    env.Set("KOROVOD_SOCKET", s.socket);
    env.Set("KOROVOD_SHM_PREFIX", shm_.prefix());
    env.Set("KOROVOD_ARENA_HEAP_MIB", std::to_string(options_.arena_heap_mib));
    env.Set("KOROVOD_START_TIMEOUT_SECONDS",
            std::to_string(std::max(1L, std::lround(options_.start_timeout_s))));
    // N sidecars on one fixed port would collide.
    env.Unset("KOROVOD_METRICS_PORT");

    launcher::ChildSpec spec;
    spec.argv = {options_.binary};
    spec.env = env.ToStrings();
    spec.stdin_fd = dev_null.get();
    spec.stdout_fd = log.get();
    spec.stderr_fd = log.get();
    spec.inherit_fds = {listeners[r].fd.get()};
    spec.die_with_parent = true;  // korovod-bench SIGKILLed: no sidecar outlives it
    auto child = ChildProcess::Start(spec);
    if (!child.ok()) {
      return child.status().WithContext("starting the rank " + std::to_string(r) + " sidecar");
    }
    s.process.emplace(std::move(*child));
    // The sidecar owns its listener now; ours would only keep the port open.
    listeners[r].fd.Reset();
  }
  return OkStatus();
}

Status SidecarJob::WaitForSockets() {
  const Deadline deadline = Deadline::After(Ms(options_.start_timeout_s));
  for (int r = 0; r < options_.ranks; ++r) {
    Sidecar& s = sidecars_[r];
    while (!IsSocket(s.socket)) {
      if (auto st = s.process->Poll()) {
        return Unavailable(Describe(r, *st) + " before creating its socket " + s.socket +
                           LogTail(r));
      }
      if (deadline.Expired()) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", options_.start_timeout_s);
        return DeadlineExceeded("rank " + std::to_string(r) +
                                " sidecar did not create its socket " + s.socket + " within " +
                                secs + " s" + LogTail(r));
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }
  return OkStatus();
}

std::string SidecarJob::Describe(int rank, const ExitStatus& st) const {
  return "rank " + std::to_string(rank) + " sidecar (" + options_.binary + ") " + st.Describe();
}

std::string SidecarJob::LogTail(int rank) const {
  std::ifstream in(sidecars_[rank].log);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(std::move(line));
    if (tail.size() > kTailLines) tail.pop_front();
  }
  if (tail.empty()) return "; its log is empty";
  std::string out = "; its log ends:";
  for (const std::string& line : tail) out += "\n  [sidecar " + std::to_string(rank) + "] " + line;
  return out;
}

std::string SidecarJob::LoggedTransport(int rank) const {
  // "korovod-sidecar: rank 0/2 on host: transport shm, listening on ..."
  std::ifstream in(sidecars_[rank].log);
  const std::string key = ": transport ";
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(key);
    if (at == std::string::npos) continue;
    const size_t begin = at + key.size();
    return line.substr(begin, line.find_first_of(", ", begin) - begin);
  }
  return "";
}

std::string SidecarJob::Failures() {
  std::string out;
  for (int r = 0; r < options_.ranks; ++r) {
    if (!sidecars_[r].process) continue;
    if (auto st = sidecars_[r].process->Poll()) {
      out += (out.empty() ? "" : "\n") + Describe(r, *st) + LogTail(r);
    }
  }
  return out;
}

Status SidecarJob::Stop(double grace_s) {
  for (Sidecar& s : sidecars_) {
    if (s.process) s.process->Signal(SIGTERM);
  }
  const Deadline deadline = Deadline::After(Ms(grace_s));
  std::string problems;
  for (int r = 0; r < options_.ranks; ++r) {
    ChildProcess& p = *sidecars_[r].process;
    std::optional<ExitStatus> st;
    while (!(st = p.Poll()) && !deadline.Expired()) std::this_thread::sleep_for(kPollInterval);
    if (!st) {
      p.Signal(SIGKILL);
      p.Wait();
      problems += "; rank " + std::to_string(r) + " sidecar did not exit within " +
                  std::to_string(std::lround(grace_s)) + " s of SIGTERM (killed)" + LogTail(r);
    } else if (!st->success()) {
      problems += "; " + Describe(r, *st) + " on SIGTERM" + LogTail(r);
    }
    // The rows were labelled with the transport asked for; the sidecar's start-up line says which
    // one its engine really picked.
    const std::string used = LoggedTransport(r);
    if (!used.empty() && used != TransportFlagName(options_.transport)) {
      problems += "; rank " + std::to_string(r) + " sidecar used transport " + used + ", not " +
                  TransportFlagName(options_.transport);
    }
  }
  if (!problems.empty()) return Internal(problems.substr(2));
  return OkStatus();
}

}  // namespace korovod::bench
