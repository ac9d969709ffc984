// World discovery: from "my rank, the world size, and either a rendezvous coordinator or a world
// file" (or, elastic: "my worker id and the membership server") to the WorldOptions of
// Communicator::Create. Binds this rank's data listener first (its port is part of what the rank
// registers), then:
//   coordinator: registers this host's candidate addresses (interfaces.h; KOROVOD_IFACE narrows
//                them to one interface) with rank 0 and receives the table (rendezvous.h);
//   world file:  reads the table (world_table.h); KOROVOD_IFACE keeps that interface's addresses;
//   elastic:     registers the same with the membership server for the next epoch and receives
//                the table with this worker's rank, the size and the epoch (elastic_rendezvous.h).
// The table's candidates then go through preflight inside Communicator::Create.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/transport/socket.h"
#include "runtime/world/world.h"

namespace korovod {

struct DiscoveryOptions {
  int rank = 0;
  int size = 1;
  std::optional<PeerAddress> coordinator;     // rendezvous at host:port, served by rank 0
  int coordinator_listen_fd = -1;             // rank 0: already listening there (tests); -1: bind
  std::string world_file;                     // or: the static table
  std::optional<PeerAddress> elastic_server;  // or: the elastic membership server
  std::string worker;                         // elastic: this worker's id
  uint32_t last_epoch = 0;                    // elastic: the epoch it last belonged to
  uint64_t min_token = 0;  // elastic: the highest fencing token met (ElasticJoinOptions)
  std::string host_name;  // the host name registered (korovodrun's virtual host); empty: this one's
  std::string iface;      // only this interface's addresses; empty: all usable
  std::string job_key;
  int listen_fd = -1;      // an already listening data socket; -1: bind one here
  uint16_t data_port = 0;  // coordinator mode, listen_fd -1: this port (0: any free one)
  std::chrono::milliseconds timeout{60000};
};

struct DiscoveredWorld {
  std::vector<RankEntry> ranks;
  int rank = 0;  // options.rank, or the one the elastic epoch assigned
  uint32_t epoch = 0;
  uint64_t formed_version = 0;  // elastic: the membership version the epoch formed at
  uint64_t token = 0;           // elastic: the server's fencing token
  Fd listener;         // the data listener bound here (invalid when options.listen_fd was given)
  int listen_fd = -1;  // the one to use
};

StatusOr<DiscoveredWorld> DiscoverWorld(const DiscoveryOptions& options);

// Sets rank, epoch, peers (each rank's first candidate, until preflight chooses), ranks and
// listen_fd.
void ApplyDiscoveredWorld(const DiscoveredWorld& world, WorldOptions& options);

}  // namespace korovod
