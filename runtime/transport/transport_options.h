// TransportOptions: who this rank is, where its peers listen, and how bytes move between them
// (TCP streams and striping, shared-memory rings, deadlines, authentication). Owned by the
// transport; runtime/world's WorldOptions extends it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace korovod {

struct PeerAddress {
  std::string host;  // IP address or name resolvable on every rank
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
};

enum class TransportKind {
  kAuto,  // shared memory when every rank is on this host, TCP otherwise
  kTcp,
  kShm,
};

// Memory of this process that lives in a POSIX shm object (the sidecar's arena): the shm transport
// maps every peer's regions so that collectives on tensors there read them in place. Every rank
// registers as many regions, in the same order.
struct SharedRegion {
  std::string shm_name;       // "/name", linked until the transport is created
  std::byte* base = nullptr;  // the object's offset 0 as mapped here
  size_t bytes = 0;           // mapped length, the same on every rank
};

// What protects the bytes on the TCP data and control connections after the handshake
// (KOROVOD_WIRE_SECURITY; wire_security.h, docs/security.md). One value for the whole job: the
// mesh refuses a peer with another, naming both. Shared memory is not affected (one pod).
enum class WireSecurity : uint8_t {
  kNone,       // data as is: anyone on the path can read and alter tensors
  kIntegrity,  // every record authenticated (AES-256-GMAC), replays and reordering refused
  kEncrypt,    // every record encrypted and authenticated (AES-256-GCM)
};

struct TransportOptions {
  int rank = 0;
  std::vector<PeerAddress> peers;  // one per rank, indexed by rank; size() is the world size

  // A socket already bound and listening on peers[rank] (tests pre-bind port 0); -1: bind here.
  int listen_fd = -1;
  // Shared secret: every peer connection proves knowledge of it (HMAC-SHA256 challenge) before
  // any tensor byte is accepted. Empty means the job runs unauthenticated.
  std::string job_key;
  // Membership epoch (elastic training makes a new one per resize or recovery). Part of every
  // handshake: a rank of another epoch is refused, naming both.
  uint32_t epoch = 0;
  // Needs a job key unless kNone.
  WireSecurity wire_security = WireSecurity::kNone;

  TransportKind transport = TransportKind::kAuto;
  std::chrono::milliseconds connect_timeout{30000};
  std::chrono::milliseconds op_timeout{60000};  // one collective, start to finish

  // TCP: connections per peer pair; messages of at least tcp_stripe_min bytes are striped.
  int tcp_streams = 4;
  size_t tcp_stripe_min = 256 * 1024;
  // TCP: extra sets of tcp_streams connections to every peer, one per collective lane, whose
  // collectives run concurrently with each other's and the main set's (Communicator::TakeLanes).
  // 0 or 1: none (one set; collectives run one at a time). Shared memory ignores it.
  int collective_lanes = 1;
  // Shared memory: a ring of slots per directed pair.
  size_t shm_slot_bytes = 256 * 1024;
  int shm_slots = 8;
  // Shared memory: each rank's window, read directly by its peers (the allreduce reduces from
  // it; buffers elsewhere go through it in pieces). /dev/shm pages on first touch. 0: no window.
  // A fused allreduce whose buffer fits is built in the window and reduced there without copies.
  size_t shm_window_bytes = size_t{64} << 20;
  std::vector<SharedRegion> shared_regions;
  // The start of the segments' names: "/" and at most 200 more characters, no other "/". A
  // launcher that unlinks every name with its job's prefix then also removes the segment of a
  // rank it killed before the segment was unlinked (ShmTransport unlinks it once all peers map it).
  std::string shm_prefix = "/korovod-";
  // Allreduce switches from recursive doubling to the ring at this many bytes (bench/ measures
  // the crossover; see docs/benchmarks.md).
  size_t small_allreduce_max_bytes = 0;  // 0: the transport's measured default
  // Microseconds a waiting rank busy-polls before it yields its core; -1: chosen from ranks per
  // host and usable cores (5 us while ranks fit on cores, 0 when oversubscribed).
  int spin_us = -1;
};

}  // namespace korovod
