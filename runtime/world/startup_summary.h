// Startup summary: the one line each rank prints once its communicator is up and its links are
// measured, so a job's log shows which network every rank ended up on.
//
//   korovod: rank 1/3 host h1 iface eth1 addr 10.1.0.2:29500 transport tcp: next rank 2 (h2)
//   10.1.0.3 (eth1) 1.95 GB/s, prev rank 0 (h0) 10.1.0.1 (eth1) 2.10 GB/s
//
// (one line). "iface"/"addr" are this rank's end of the link to its next neighbour (the
// interface its traffic leaves by) and its data port; each neighbour shows the IP at the far end
// of the link, that rank's interface for it (from the world table, or "?"), and the link rate
// measured by ProbeRingLinks (GB/s = 1e9 bytes per second). A world of several hosts where some
// hold several ranks ends with the allreduce's shape and why: "; allreduce hierarchical (2 hosts
// x 2 ranks)" or "; allreduce flat (turned off)".
#pragma once

#include <string>
#include <vector>

#include "runtime/world/communicator.h"
#include "runtime/world/interfaces.h"
#include "runtime/world/link_probe.h"

namespace korovod {

// `interfaces`: this host's (ListInterfaces) to name the local end; `host_name`: this rank's.
std::string FormatStartupSummary(const Communicator& comm, const std::vector<LinkRate>& rates,
                                 const std::vector<NetInterface>& interfaces,
                                 const std::string& host_name);

}  // namespace korovod
