#include "runtime/world/communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "runtime/transport/peer_mesh.h"
#include "runtime/transport/shm_transport.h"
#include "runtime/transport/socket.h"
#include "runtime/transport/tcp_transport.h"
#include "runtime/world/preflight.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

// Measured crossovers between recursive doubling and the ring (docs/benchmarks.md).
constexpr size_t kSmallAllreduceShm = 32 << 10;
constexpr size_t kSmallAllreduceTcp = 32 << 10;

// The host each rank counts as: options.hosts, else the world table's nodes, else the peers'
// addresses as written (ranks on 127.0.0.2 and 127.0.0.3 count apart, as korovod-bench's TCP
// sidecars want; the wait policy still counts them as one machine).
std::vector<std::string> HostPerRank(const WorldOptions& options) {
  if (!options.hosts.empty()) return options.hosts;
  std::vector<std::string> out;
  for (size_t r = 0; r < options.peers.size(); ++r) {
    if (!options.ranks.empty()) {
      out.push_back(options.ranks[r].node);
    } else {
      out.push_back(options.peers[r].host);
    }
  }
  return out;
}

// Every rank must take the same shape: a hierarchical rank trades shared-memory names over the
// control connections that a flat one never sends (KOROVOD_HIERARCHICAL_ALLREDUCE set differently
// on some ranks). One byte each way with every peer, before anything else uses them.
Status AgreeOnHierarchy(PeerMesh& mesh, const HierarchyChoice& mine, Deadline deadline) {
  const char byte = mine.on ? 1 : 0;
  // A peer that fails here (or gave up forming its own mesh) says why on its control
  // connection: ExplainFailure names that cause rather than "closed the connection".
  for (int p = 0; p < mesh.size(); ++p) {
    if (p == mesh.rank()) continue;
    Status s = WriteFull(mesh.fd(p, 0), &byte, 1, deadline, mesh.Describe(p));
    if (!s.ok()) return mesh.ExplainFailure(p, s);
  }
  for (int p = 0; p < mesh.size(); ++p) {
    if (p == mesh.rank()) continue;
    char theirs = 0;
    Status s = ReadFull(mesh.fd(p, 0), &theirs, 1, deadline, mesh.Describe(p));
    if (!s.ok()) return mesh.ExplainFailure(p, s);
    if (theirs != byte) {
      return InvalidArgument(std::string("hierarchical allreduce is ") + (mine.on ? "on" : "off") +
                             " here (" + mine.reason + ") but " + (theirs ? "on" : "off") + " on " +
                             mesh.Describe(p) +
                             ": set KOROVOD_HIERARCHICAL_ALLREDUCE alike on every rank");
    }
  }
  return OkStatus();
}

// Cores this process may run on (taskset/cgroup cpusets shrink it below the machine's count).
int CoreCount() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

Communicator::Communicator(WorldOptions options, std::unique_ptr<Transport> transport)
    : options_(std::move(options)),
      world_(ProcessSet::World(static_cast<int>(options_.peers.size()), options_.rank)),
      transport_(std::move(transport)) {}

Communicator::~Communicator() = default;

StatusOr<std::unique_ptr<Communicator>> Communicator::Create(const WorldOptions& options) {
  if (options.peers.empty()) return InvalidArgument("WorldOptions.peers is empty");
  if (options.rank < 0 || options.rank >= static_cast<int>(options.peers.size())) {
    return InvalidArgument("rank " + std::to_string(options.rank) +
                           " is outside the world of size " + std::to_string(options.peers.size()));
  }
  if (options.connect_timeout.count() <= 0 || options.op_timeout.count() <= 0) {
    return InvalidArgument("connect_timeout and op_timeout must be positive");
  }
  const bool with_table = !options.ranks.empty();
  if (with_table && options.ranks.size() != options.peers.size()) {
    return InvalidArgument("WorldOptions.ranks has " + std::to_string(options.ranks.size()) +
                           " entries but peers " + std::to_string(options.peers.size()));
  }
  if (!options.hosts.empty() && options.hosts.size() != options.peers.size()) {
    return InvalidArgument("WorldOptions.hosts has " + std::to_string(options.hosts.size()) +
                           " entries but peers " + std::to_string(options.peers.size()));
  }
  // With a world table the node ids say who shares a machine (host strings differ per address).
  const HostLayout layout = HostLayoutOf(HostPerRank(options));
  const bool one_host = layout.hosts.size() == 1;
  KV_ASSIGN_OR_RETURN(HierarchyChoice hierarchy, ChooseHierarchy(layout, options.hierarchical));
  TransportKind kind = options.transport;
  if (kind == TransportKind::kAuto) kind = one_host ? TransportKind::kShm : TransportKind::kTcp;
  if (kind == TransportKind::kShm && !one_host) {
    return InvalidArgument(
        "the shm transport needs every rank on one host, but peers name "
        "several hosts");
  }
  int local_ranks = 0;  // ranks competing for this host's cores
  for (int r = 0; r < static_cast<int>(options.peers.size()); ++r) {
    const std::string& mine = options.peers[options.rank].host;
    const std::string& theirs = options.peers[r].host;
    // Loopback addresses are all this machine (ranks on 127.0.0.2 and 127.0.0.3 share its
    // cores, as korovod-bench's TCP sidecars do): counting them apart would let
    // oversubscribed ranks spin.
    const bool same =
        with_table ? options.ranks[r].node == options.ranks[options.rank].node
                   : theirs == mine || (IsLoopbackAddress(theirs) && IsLoopbackAddress(mine));
    if (same) ++local_ranks;
  }
  WaitPolicy wait = WaitPolicy::For(local_ranks, CoreCount());
  if (options.spin_us >= 0) wait.spin = std::chrono::microseconds(options.spin_us);
  const int lanes = kind == TransportKind::kTcp ? std::max(1, options.collective_lanes) : 1;
  if (kind == TransportKind::kTcp && (options.tcp_streams < 1 || lanes > 16 ||
                                      options.tcp_streams * (lanes > 1 ? lanes + 1 : 1) > 64)) {
    return InvalidArgument("tcp_streams " + std::to_string(options.tcp_streams) + " x (1 + " +
                           std::to_string(lanes > 1 ? lanes : 0) +
                           " collective lanes) must be in [1, 64] connections per peer");
  }
  // The main set of streams, then one set per lane.
  const int sets = lanes > 1 ? lanes + 1 : 1;
  const int streams = kind == TransportKind::kTcp ? options.tcp_streams * sets : 1;
  PeerMesh::DialPlanner plan;
  if (with_table) {
    plan = [&options](std::vector<PeerAddress>& peers, Deadline deadline) {
      return ChooseDialAddresses(options, peers, deadline);
    };
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<PeerMesh> mesh_owned,
                      PeerMesh::Connect(options, streams, plan));
  std::shared_ptr<PeerMesh> mesh = std::move(mesh_owned);
  // Preflight may have chosen other addresses than peers[]: errors name the ones in use.
  WorldOptions effective = options;
  std::vector<LinkEnds> ends(effective.peers.size());
  for (int p = 0; p < mesh->size(); ++p) {
    ends[p] = {mesh->LocalIp(p), mesh->RemoteIp(p)};
    // A higher rank chose which of our addresses to dial and came from its address on that
    // network: name it by that one rather than by its first candidate.
    const bool from_candidate =
        with_table && p > options.rank &&
        std::any_of(options.ranks[p].addresses.begin(), options.ranks[p].addresses.end(),
                    [&](const CandidateAddress& a) { return a.host == ends[p].remote_ip; });
    if (from_candidate) mesh->SetPeerAddress(p, {ends[p].remote_ip, options.peers[p].port});
    effective.peers[p] = mesh->peer(p);
  }

  KV_RETURN_IF_ERROR(AgreeOnHierarchy(*mesh, hierarchy, Deadline::After(options.connect_timeout)));
  std::unique_ptr<Transport> transport;
  if (kind == TransportKind::kShm) {
    KV_ASSIGN_OR_RETURN(
        auto shm,
        ShmTransport::Create(mesh, options.shm_slot_bytes, options.shm_slots,
                             options.shm_window_bytes, options.shared_regions, wait,
                             Deadline::After(options.connect_timeout), options.shm_prefix));
    transport = std::move(shm);
  } else {
    transport =
        std::make_unique<TcpTransport>(mesh, options.tcp_stripe_min, wait, 0, options.tcp_streams);
  }
  const bool oversubscribed = local_ranks > CoreCount();
  const std::vector<int> host_ranks = layout.LocalRanks(options.rank);
  auto make = [&](std::unique_ptr<Transport> t) -> StatusOr<std::unique_ptr<Communicator>> {
    auto c = std::make_unique<Communicator>(effective, std::move(t));
    c->link_ends_ = ends;
    c->local_ranks_ = local_ranks;
    c->oversubscribed_ = oversubscribed;
    c->host_layout_ = layout;
    c->hierarchy_ = hierarchy;
    if (hierarchy.on) {
      const int n = static_cast<int>(options.peers.size());
      KV_ASSIGN_OR_RETURN(c->local_set_, ProcessSet::Create(host_ranks, n, options.rank));
      KV_ASSIGN_OR_RETURN(c->cross_set_,
                          ProcessSet::Create(layout.CrossRanks(options.rank), n, options.rank));
      // This host's ranks meet over shared memory (each communicator, lanes too, its own rings).
      KV_ASSIGN_OR_RETURN(c->local_transport_,
                          ShmTransport::Create(mesh, options.shm_slot_bytes, options.shm_slots, 0,
                                               {}, wait, Deadline::After(options.connect_timeout),
                                               options.shm_prefix, host_ranks));
    }
    return c;
  };
  KV_ASSIGN_OR_RETURN(auto comm, make(std::move(transport)));
  for (int l = 1; l < sets; ++l) {
    KV_ASSIGN_OR_RETURN(auto lane, make(std::make_unique<TcpTransport>(
                                       mesh, options.tcp_stripe_min, wait, l * options.tcp_streams,
                                       options.tcp_streams)));
    comm->lanes_.push_back(std::move(lane));
  }
  return comm;
}

std::string Communicator::DescribePeer(int r) const {
  return "rank " + std::to_string(r) + " (" + options_.peers[r].ToString() + ")";
}

std::byte* Communicator::Scratch(int which, size_t bytes) {
  if (scratch_size_[which] < bytes) {
    scratch_[which] = std::make_unique_for_overwrite<std::byte[]>(bytes);
    scratch_size_[which] = bytes;
  }
  return scratch_[which].get();
}

void Communicator::Tune(size_t small_allreduce_max_bytes, size_t tcp_stripe_min) {
  if (small_allreduce_max_bytes != 0)
    options_.small_allreduce_max_bytes = small_allreduce_max_bytes;
  if (tcp_stripe_min != 0) {
    options_.tcp_stripe_min = tcp_stripe_min;
    transport_->SetStripeMin(tcp_stripe_min);
  }
}

size_t Communicator::small_allreduce_max_bytes() const {
  if (options_.small_allreduce_max_bytes != 0) return options_.small_allreduce_max_bytes;
  return std::string_view(transport_->Name()) == "shm" ? kSmallAllreduceShm : kSmallAllreduceTcp;
}

}  // namespace korovod
