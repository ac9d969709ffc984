// World: who this rank is and where its peers listen. The input to Communicator::Create.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/transport/transport_options.h"

namespace korovod {

// One address a rank can be reached at, and the network interface it belongs to on that rank.
struct CandidateAddress {
  std::string iface;  // e.g. "eth1"; empty when not known (a world file may leave it out)
  std::string host;   // IPv4 address (or a name resolvable on every rank)
};

enum class HierarchyMode { kAuto, kOn, kOff };

// A rank as a rendezvous or a world file describes it (runtime/world/world_table.h).
struct RankEntry {
  std::string host_name;  // the rank's host, for messages
  std::string node;       // equal on ranks that share a machine and network namespace
  uint16_t port = 0;      // the rank's data listen port
  std::vector<CandidateAddress> addresses;  // in order of preference
};

// The transport's settings (transport_options.h) plus what only the world needs: the candidate
// addresses a rendezvous or world file gives, checked by preflight before the transport connects.
// Derived rather than nested so that every setting keeps one name (options.tcp_streams) wherever
// it is read.
struct WorldOptions : TransportOptions {
  // Optional, indexed by rank (from a rendezvous or a world file): every rank's candidate
  // addresses. When set, preflight (runtime/world/preflight.h) dials each lower rank over the
  // first of its addresses that connects and authenticates, and peers[] of those ranks becomes
  // that choice; an unreachable rank fails naming its host and every address and interface tried.
  std::vector<RankEntry> ranks;
  // Preflight: how long one connection attempt to one candidate address may take.
  std::chrono::milliseconds probe_attempt_timeout{2000};

  // Optional, indexed by rank: the host each rank counts as (korovodrun's virtual hosts; tests).
  // Ranks with equal names are one host: shared memory among them, TCP between hosts. Empty:
  // ranks[].node when there is a world table, else peers[].host (loopback is one host).
  std::vector<std::string> hosts;
  // Hierarchical collectives (runtime/world/host_layout.h): kAuto takes them when the world spans
  // several hosts that each hold the same number (> 1) of ranks.
  HierarchyMode hierarchical = HierarchyMode::kAuto;
};

}  // namespace korovod
