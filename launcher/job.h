// Job: one local korovodrun job. Sets up the shared pieces (loopback listeners, run directory, job
// key, shared-memory prefix), starts a sidecar per rank and the rank's trainer once the sidecar's
// unix socket exists, pumps their output, and supervises them in one poll(2) loop: the first
// failure (or SIGINT/SIGTERM/SIGHUP) stops everything with SIGTERM (or the forwarded signal), then
// SIGKILL after the grace period. Every exit path removes the run directory and the job's shared
// memory segments.
#pragma once

#include <string>
#include <vector>

#include "launcher/fd_writer.h"
#include "launcher/options.h"
#include "launcher/rank_layout.h"

namespace korovod::launcher {

struct JobConfig {
  LauncherOptions options;
  std::vector<RankPlacement> layout;  // one entry per rank, in rank order
  std::string sidecar_path;
};

class Job {
 public:
  // `out` and `err` receive the prefixed lines and korovodrun's own messages.
  Job(JobConfig config, FdWriter* out, FdWriter* err)
      : config_(std::move(config)), out_(out), err_(err) {}

  // Runs the job to the end; returns korovodrun's exit code: 0 when every trainer exited 0; the
  // failing trainer's exit code (1 when it had none, 127 when it could not be executed); 1 for a
  // failing sidecar or launcher error; 128+signal when korovodrun was interrupted.
  int Run();

 private:
  JobConfig config_;
  FdWriter* out_;
  FdWriter* err_;
};

}  // namespace korovod::launcher
