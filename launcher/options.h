// LauncherOptions: korovodrun's command line.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace korovod::launcher {

struct LauncherOptions {
  int num_proc = 0;                         // -np N (elastic: optional, the default --min-np)
  std::optional<std::string> hosts;         // -H host:slots,... (raw; see rank_layout.h)
  std::optional<std::string> timeline;      // --timeline FILE
  bool verbose = false;                     // --verbose
  std::optional<std::string> sidecar_path;  // --sidecar PATH
  double start_timeout_s = 60.0;            // --start-timeout S
  double grace_period_s = 5.0;              // --grace-period S
  bool help = false;                        // -h / --help

  // Elastic (Horovod's flags; any of the first three makes the job elastic): workers fill the
  // slots of the hosts that --host-discovery-script (re-run every second) or -H lists, between
  // --min-np and --max-np of them; a worker that fails is dropped and its host blacklisted, and
  // the survivors carry on in a new membership epoch (docs/elastic.md).
  std::optional<int> min_np;                    // --min-np / --min-num-proc (default: -np)
  std::optional<int> max_np;                    // --max-np / --max-num-proc (default: no limit)
  std::optional<std::string> discovery_script;  // --host-discovery-script: prints host[:slots]
  int slots_per_host = 1;                       // --slots-per-host: a listed host without :slots
  double elastic_timeout_s = 600.0;             // --elastic-timeout S
  std::optional<int> reset_limit;               // --reset-limit N
  std::optional<std::pair<double, double>> blacklist_cooldown;  // --blacklist-cooldown-range LO HI
  bool elastic() const { return min_np || max_np || discovery_script; }
  std::vector<std::string> command;  // the trainer command and its arguments
};

// Parses argv[1..]. The first argument that is not a flag (or everything after "--") starts the
// trainer command. Errors are INVALID_ARGUMENT with a one-line message for the usage text.
StatusOr<LauncherOptions> ParseOptions(const std::vector<std::string>& args);

// The usage text (several lines, ends with a newline).
const char* UsageText();

}  // namespace korovod::launcher
