// LauncherOptions: korovodrun's command line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace korovod::launcher {

struct LauncherOptions {
  int num_proc = 0;                         // -np N
  std::optional<std::string> hosts;         // -H host:slots,... (raw; see rank_layout.h)
  std::optional<std::string> timeline;      // --timeline FILE
  bool verbose = false;                     // --verbose
  std::optional<std::string> sidecar_path;  // --sidecar PATH
  double start_timeout_s = 60.0;            // --start-timeout S
  double grace_period_s = 5.0;              // --grace-period S
  bool help = false;                        // -h / --help
  std::vector<std::string> command;         // the trainer command and its arguments
};

// Parses argv[1..]. The first argument that is not a flag (or everything after "--") starts the
// trainer command. Errors are INVALID_ARGUMENT with a one-line message for the usage text.
StatusOr<LauncherOptions> ParseOptions(const std::vector<std::string>& args);

// The usage text (several lines, ends with a newline).
const char* UsageText();

}  // namespace korovod::launcher
