// The autotune CSV: a header, one row per finished trial, and a final row (trial `final`) with
// the parameters the search settled on. Every row is written with one write(2) as it comes.
#pragma once

#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"
#include "runtime/core/autotune/autotuner.h"

namespace korovod::autotune {

inline constexpr std::string_view kTrialLogHeader =
    "trial,fusion_threshold_bytes,cycle_time_ms,small_allreduce_max_bytes,tcp_stripe_min_bytes,"
    "score_bytes_per_sec,best\n";

class TrialLog {
 public:
  // Creates (truncates) `path` with mode 0644 and writes the header. InvalidArgument naming the
  // path if its directory does not exist or the file cannot be opened or written.
  static StatusOr<TrialLog> Open(const std::string& path);

  TrialLog(TrialLog&& other) noexcept = default;
  TrialLog& operator=(TrialLog&& other) noexcept = default;

  // `best`: this trial is the best so far. Trials are numbered from 1.
  Status WriteTrial(int trial, const TunableParams& params, double score, bool best);
  Status WriteFinal(const TunableParams& params, double score);

  const std::string& path() const { return path_; }

 private:
  TrialLog(int fd, std::string path);
  Status WriteRow(std::string_view trial, const TunableParams& params, double score, bool best);
  Status WriteAll(std::string_view text);

  Fd fd_;
  std::string path_;
};

}  // namespace korovod::autotune
