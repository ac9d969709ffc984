// SidecarJob: the N korovod-sidecar processes that one world of `korovod-bench --via sidecar`
// runs through, started the way korovodrun starts them (launcher/README.md): a private
// run directory with the job key file (0600) and the unix sockets, one listening socket per rank
// bound before any sidecar exists (KOROVOD_LISTEN_FD, KOROVOD_PEERS), a shared-memory prefix for
// the arenas. Each sidecar writes its output to a log in the run directory; a failure quotes the
// log's last lines. Destruction kills whatever is still running (by pid/process group), removes
// the run directory and unlinks every /dev/shm entry of the job, whichever way the run ended.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"
#include "launcher/child_process.h"
#include "launcher/run_dir.h"
#include "launcher/shm_cleanup.h"

namespace korovod::bench {

struct SidecarJobOptions {
  std::string binary;  // korovod-sidecar
  int ranks = 2;
  // shm: every rank at 127.0.0.1, so the engine picks shared memory (TransportKind::kAuto on
  // one host). tcp: rank r at its own loopback address (127.0.0.(r+1) for r < 254), so the engine
  // sees as many hosts as ranks and picks TCP; the sidecar has no transport setting of its own.
  TransportKind transport = TransportKind::kShm;
  int arena_heap_mib = 64;      // KOROVOD_ARENA_HEAP_MIB: client heap and result heap, each
  double start_timeout_s = 60;  // until every sidecar's socket exists
};

class SidecarJob {
 public:
  // Starts every sidecar and waits for every socket. On failure nothing is left running and the
  // error names the rank and the cause (exit status and log tail, or the deadline).
  static StatusOr<std::unique_ptr<SidecarJob>> Start(const SidecarJobOptions& options);
  ~SidecarJob();
  SidecarJob(const SidecarJob&) = delete;
  SidecarJob& operator=(const SidecarJob&) = delete;

  const std::string& socket(int rank) const { return sidecars_[rank].socket; }

  // Empty while every sidecar runs; otherwise one line per sidecar that has ended ("rank 1
  // sidecar exited with code 1"), with its log's last lines.
  std::string Failures();
  // SIGTERM to every sidecar, SIGKILL to those still there after `grace_s`. OK when every
  // sidecar exited 0 and reported the transport it was started for.
  Status Stop(double grace_s);

 private:
  struct Sidecar {
    std::string socket;
    std::string log;
    std::optional<launcher::ChildProcess> process;
  };

  explicit SidecarJob(const SidecarJobOptions& options);
  Status Launch();
  Status WaitForSockets();
  std::string Describe(int rank, const launcher::ExitStatus& st) const;
  std::string LogTail(int rank) const;
  // The transport named in the sidecar's start-up line, or "" if it printed none.
  std::string LoggedTransport(int rank) const;

  const SidecarJobOptions options_;
  // Destroyed in reverse order: the processes die before the run directory goes, and that
  // before the shared-memory sweep.
  launcher::ShmPrefixCleanup shm_;
  std::optional<launcher::RunDir> run_dir_;
  std::vector<Sidecar> sidecars_;
};

}  // namespace korovod::bench
