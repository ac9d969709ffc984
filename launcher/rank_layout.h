// Rank layout: which (virtual) host each rank runs on, and its local and cross ranks, computed
// exactly as Horovod does: ranks fill the hosts in the order given, each up to its slots;
// local_rank/local_size count ranks on the same host; cross_rank/cross_size count the hosts that
// have a process at the same local_rank.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace korovod::launcher {

struct HostSlots {
  std::string host;
  int slots = 0;
};

struct RankPlacement {
  int rank = 0;
  int size = 0;
  std::string host;
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;
  int cross_size = 0;
};

// Parses "host:slots,host:slots,..." (the port-like suffix after the last ':' is the slot count).
// Hosts must be distinct and slots at least 1.
StatusOr<std::vector<HostSlots>> ParseHostList(const std::string& text);

// Places `num_proc` ranks on `hosts`. Fails when the slots sum to less than num_proc. Hosts that
// get no rank are left out of the layout.
StatusOr<std::vector<RankPlacement>> ComputeRankLayout(const std::vector<HostSlots>& hosts,
                                                       int num_proc);

}  // namespace korovod::launcher
