// Rendezvous: ranks that know only their rank, the world size and the coordinator's address learn
// where every other rank listens. Rank 0 serves the coordinator; every other rank connects to it
// (retrying with backoff: rank 0 may start later), authenticates with the job key (the mesh's
// handshake, runtime/transport/handshake.h), and registers its host, node, data port and
// candidate addresses. Once all ranks have registered, rank 0 applies ApplyLoopbackRule and sends
// every rank the same world table (world_table.h format).
//
// Every wait ends at options.timeout; errors name the rank, its host and the coordinator address.
// A connection with another job key is refused (the dialer gets PermissionDenied) and the
// coordinator keeps waiting for the real rank.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod {

struct RendezvousOptions {
  int rank = 0;
  int size = 1;
  // Rank 0 listens on this port on every interface (the host is how the others reach it, which
  // in a cluster is often a service name); the others dial host:port.
  PeerAddress coordinator;
  int coordinator_listen_fd = -1;  // rank 0: an already listening socket (tests); -1: bind here
  std::string job_key;
  RankEntry self;  // this rank's registration
  std::chrono::milliseconds timeout{60000};
};

// Every rank's entry, indexed by rank; the same table on every rank.
StatusOr<std::vector<RankEntry>> Rendezvous(const RendezvousOptions& options);

}  // namespace korovod
