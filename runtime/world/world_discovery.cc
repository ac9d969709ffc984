#include "runtime/world/world_discovery.h"

#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/host_identity.h"
#include "runtime/world/interfaces.h"
#include "runtime/world/rendezvous.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

constexpr int kListenBacklog = 128;

Status BindListener(const DiscoveryOptions& o, uint16_t port, DiscoveredWorld& w) {
  if (o.listen_fd >= 0) {
    w.listen_fd = o.listen_fd;
    return OkStatus();
  }
  auto l = ListenTcp("0.0.0.0", port, kListenBacklog);
  if (!l.ok()) {
    return l.status().WithContext("rank " + std::to_string(o.rank) + ": data listener");
  }
  w.listener = std::move(l).value();
  w.listen_fd = w.listener.get();
  return OkStatus();
}

}  // namespace

StatusOr<DiscoveredWorld> DiscoverWorld(const DiscoveryOptions& o) {
  if (o.coordinator.has_value() + !o.world_file.empty() + o.elastic_server.has_value() != 1) {
    return InvalidArgument(
        "world discovery needs exactly one of a coordinator, a world file and an elastic server");
  }
  DiscoveredWorld w;
  w.rank = o.rank;
  if (!o.world_file.empty()) {
    KV_ASSIGN_OR_RETURN(w.ranks, ReadWorldFile(o.world_file, o.size));
    if (!o.iface.empty()) {
      KV_RETURN_IF_ERROR(RestrictToInterface(w.ranks, o.iface, "world file " + o.world_file));
    }
    ApplyLoopbackRule(w.ranks);
    KV_RETURN_IF_ERROR(BindListener(o, w.ranks[o.rank].port, w));
    return w;
  }
  KV_ASSIGN_OR_RETURN(std::vector<NetInterface> interfaces, ListInterfaces());
  RankEntry self;
  self.host_name = o.host_name.empty() ? LocalHostName() : o.host_name;
  self.node = LocalNodeId();
  const std::string me = o.elastic_server ? "worker " + o.worker : "rank " + std::to_string(o.rank);
  auto candidates = SelectCandidates(interfaces, o.iface);
  if (!candidates.ok()) {
    return candidates.status().WithContext(me + " (host " + self.host_name + ")");
  }
  self.addresses = std::move(candidates).value();
  KV_RETURN_IF_ERROR(BindListener(o, o.data_port, w));
  KV_ASSIGN_OR_RETURN(self.port, LocalPort(w.listen_fd));
  if (o.elastic_server) {
    ElasticJoinOptions j;
    j.server = *o.elastic_server;
    j.job_key = o.job_key;
    j.worker = o.worker;
    j.last_epoch = o.last_epoch;
    j.self = std::move(self);
    j.timeout = o.timeout;
    j.min_token = o.min_token;
    KV_ASSIGN_OR_RETURN(ElasticAssignment a, JoinElasticEpoch(j));
    w.token = a.token;
    w.ranks = std::move(a.table);
    w.rank = a.rank;
    w.epoch = a.epoch;
    w.formed_version = a.version;
    return w;
  }
  RendezvousOptions r;
  r.rank = o.rank;
  r.size = o.size;
  r.coordinator = *o.coordinator;
  r.coordinator_listen_fd = o.coordinator_listen_fd;
  r.job_key = o.job_key;
  r.timeout = o.timeout;
  r.self = std::move(self);
  KV_ASSIGN_OR_RETURN(w.ranks, Rendezvous(r));
  return w;
}

void ApplyDiscoveredWorld(const DiscoveredWorld& world, WorldOptions& options) {
  options.rank = world.rank;
  options.epoch = world.epoch;
  options.peers = FirstChoicePeers(world.ranks);
  options.ranks = world.ranks;
  options.listen_fd = world.listen_fd;
}

}  // namespace korovod
