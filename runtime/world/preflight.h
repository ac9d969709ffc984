// Preflight: before the mesh forms, each rank checks that it can reach every rank it will dial
// (the lower ranks: in a ring every link is checked, from its higher end) and picks, per rank,
// the first candidate address that connects and authenticates. A broken interface is skipped; an
// unreachable rank is an error naming it, its host, and each address and interface tried with
// why it failed.
//
// Runs inside Communicator::Create while this rank already answers probes and connections
// (PeerMesh::Connect's DialPlanner), so ranks that probe each other cannot wait on each other.
#pragma once

#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod {

// For every rank p < options.rank, tries options.ranks[p].addresses in order, each attempt bounded
// by options.probe_attempt_timeout, going round again until `deadline`; sets peers[p] to the
// first that works. Lower ranks are probed concurrently, so a broken interface costs one attempt
// timeout, not one per peer. PermissionDenied at once when a peer holds another job key.
Status ChooseDialAddresses(const WorldOptions& options, std::vector<PeerAddress>& peers,
                           Deadline deadline);

}  // namespace korovod
