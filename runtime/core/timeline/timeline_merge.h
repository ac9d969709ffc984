// Merges per-rank timeline files into one trace with one process lane per rank ("rank N"),
// every event shifted by its file's clock offset so that all ranks share rank 0's time axis.
// Tolerates files whose JSON array was never closed (a rank killed mid-run).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace korovod {

// Returns the merged trace JSON text (an object {"traceEvents":[...],"displayTimeUnit":"ms"}).
// Errors name the file and the reason (missing, not a korovod timeline, malformed JSON at byte N).
StatusOr<std::string> MergeTimelines(const std::vector<std::string>& paths);
// The same on texts already read: (name for messages, file contents) per rank.
StatusOr<std::string> MergeTimelineTexts(
    const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace korovod
