// korovod-sidecar: hosts the collective engine for each rank it serves (one, or every rank of a
// pod: KOROVOD_SIDECAR_RANKS) and serves each rank's trainer over its own unix socket (gRPC control
// plane) and shared-memory arena (tensors and op queues). Configured by the environment
// (launcher/README.md); SIGTERM/SIGINT stop it cleanly.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/env_names.h"
#include "common/http/health_server.h"
#include "common/http/metrics_registry.h"
#include "common/log.h"
#include "runtime/core/engine.h"
#include "runtime/core/engine_config.h"
#include "runtime/world/communicator.h"
#include "runtime/world/host_identity.h"
#include "runtime/world/interfaces.h"
#include "runtime/world/link_probe.h"
#include "runtime/world/startup_summary.h"
#include "runtime/world/world_discovery.h"
#include "sidecar/arena/arena.h"
#include "sidecar/daemon/device_backend_choice.h"
#include "sidecar/daemon/engine_metrics.h"
#include "sidecar/daemon/memory_channel.h"
#include "sidecar/daemon/op_loop.h"
#include "sidecar/daemon/rank_epochs.h"
#include "sidecar/daemon/sidecar_config.h"
#include "sidecar/daemon/sidecar_service.h"

namespace korovod::sidecar {
namespace {

int Fail(const Status& s) {
  KV_LOG(kError, kSidecar, "%s", s.ToString().c_str());
  return 1;
}

// Every peer gets tcp_streams connections per collective lane plus the main set: a large world
// outgrows a 1024-descriptor soft limit, so the sidecar takes what the hard limit allows.
void RaiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &limit);
}

// Bytes per timed round of the start-up link probe: a few MiB, well under a second per link.
constexpr size_t kLinkProbeBytes = 2 << 20;

// The world as configured: this rank, its peers (if korovodrun named them), the job key.
StatusOr<WorldOptions> WorldOptionsFrom(const SidecarConfig& cfg) {
  WorldOptions world;
  world.rank = cfg.rank;
  world.peers = cfg.peers;
  world.hosts = cfg.hosts;
  world.listen_fd = cfg.listen_fd;
  world.connect_timeout = cfg.start_timeout;
  world.op_timeout = cfg.op_timeout;
  world.shm_prefix = cfg.shm_prefix;  // korovodrun unlinks the job's prefix if a rank is killed
  world.epoch = cfg.epoch;            // elastic epochs replace it (ApplyDiscoveredWorld)
  if (!cfg.job_key_file.empty()) {
    KV_ASSIGN_OR_RETURN(world.job_key, ReadJobKeyFile(cfg.job_key_file));
  } else if (!cfg.job_key.empty()) {
    world.job_key = cfg.job_key;
  }
  return world;
}

// Coordinator or world-file mode: every rank's candidate addresses, by rendezvous or from the
// file, into `world`. `discovered` owns the data listener until the mesh is connected.
Status DiscoverPeers(const SidecarConfig& cfg, const Deadline& start, WorldOptions& world,
                     DiscoveredWorld& discovered) {
  DiscoveryOptions d;
  d.rank = cfg.rank;
  d.size = cfg.size;
  d.coordinator = cfg.coordinator;
  d.world_file = cfg.world_file;
  d.iface = cfg.iface;
  d.job_key = world.job_key;
  d.listen_fd = cfg.listen_fd;
  d.data_port = static_cast<uint16_t>(cfg.data_port);
  d.timeout = cfg.start_timeout;
  KV_ASSIGN_OR_RETURN(discovered, DiscoverWorld(d));
  ApplyDiscoveredWorld(discovered, world);
  world.connect_timeout = std::chrono::milliseconds(std::max(1, start.RemainingMs()));
  return OkStatus();
}

// The mesh (with preflight), then the ring's link rates and this rank's one summary line.
struct ConnectedWorld {
  std::unique_ptr<Communicator> comm;
  std::vector<LinkRate> rates;
};
StatusOr<ConnectedWorld> ConnectWorld(const SidecarConfig& cfg, const WorldOptions& world,
                                      DiscoveredWorld& discovered, const Deadline& start) {
  const std::string me = "rank " + std::to_string(cfg.rank);
  auto comm = Communicator::Create(world);
  if (!comm.ok()) return comm.status().WithSubject(me);
  discovered.listener.Reset();  // every peer is connected: nobody dials this rank any more
  const Deadline probe_deadline(std::max(start.at(), Clock::now() + std::chrono::seconds(5)));
  auto rates = ProbeRingLinks(**comm, kLinkProbeBytes, probe_deadline);
  if (!rates.ok()) return rates.status().WithSubject(me);
  auto interfaces = ListInterfaces();
  KV_LOG(kInfo, kWorld, "%s",
         FormatStartupSummary(**comm, *rates,
                              interfaces.ok() ? *interfaces : std::vector<NetInterface>{},
                              LocalHostName())
             .c_str());
  return ConnectedWorld{std::move(*comm), std::move(*rates)};
}

// /healthz, /readyz and /metrics on KOROVOD_METRICS_PORT (null when it is negative: off).
// `before_scrape` brings the metrics up to date.
StatusOr<std::unique_ptr<http::HealthServer>> ServeHealth(const SidecarConfig& cfg,
                                                          http::MetricsRegistry& registry,
                                                          std::function<void()> before_scrape) {
  if (cfg.metrics_port < 0) return std::unique_ptr<http::HealthServer>();
  http::HealthServerOptions opts;
  opts.port = cfg.metrics_port;
  opts.registry = &registry;
  opts.before_scrape = std::move(before_scrape);
  auto server = http::HealthServer::Start(std::move(opts));
  if (!server.ok()) return server.status().WithContext(env::kMetricsPort);
  (*server)->SetReady(true);
  return std::move(*server);
}

// The trainers' gRPC socket. The socket file is korovodrun's readiness signal: it is created
// with its final mode (0660), so nobody sees it before it is usable.
std::unique_ptr<grpc::Server> ServeTrainers(const std::string& socket_path,
                                            SidecarService& service) {
  // A stale socket of an earlier run: a live sidecar of this rank would hold the arena's lock,
  // and Arena::Create, before this, refused to go on.
  ::unlink(socket_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  const mode_t old_umask = ::umask(0117);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(old_umask);
  if (server != nullptr) ::chmod(socket_path.c_str(), 0660);
  return server;
}

// The end-of-run summary korovodrun shows: this rank's waits, and on rank 0 the straggler, if
// one rank was the one the others waited for in most steps.
void LogEndOfRun(int rank, const Engine& engine) {
  const EngineStats s = engine.stats();
  if (s.steps == 0) return;
  KV_LOG(kInfo, kEngine,
         "korovod: rank %d end of run: %llu steps; waited for others %.3f s; others waited for "
         "it %.3f s (%.3f s of that before its first op of a step); the straggler in %llu steps",
         rank, static_cast<unsigned long long>(s.steps), s.waited_for_others_ns * 1e-9,
         s.others_waited_for_me_ns * 1e-9, s.waited_before_first_ns * 1e-9,
         static_cast<unsigned long long>(s.straggler_steps));
  if (rank != 0) return;
  const std::string line = engine.StragglerLine();
  if (!line.empty()) KV_LOG(kWarning, kEngine, "korovod: %s", line.c_str());
}

// Until `stop` (SIGTERM, SIGINT, or another served rank failed) or this rank's trainer's
// Shutdown; an engine failure turns /readyz red and is logged once per epoch, and the sidecar
// stays up so that trainers get the error with their ops (elastic: and then reset into the next
// epoch, which turns /readyz green again).
void WaitForShutdown(const std::atomic<bool>& stop, const std::atomic<bool>& shutdown_requested,
                     const RankEpochs& epochs, http::HealthServer* health) {
  const ServedEpoch* failed = nullptr;
  const ServedEpoch* seen = nullptr;
  while (!shutdown_requested.load() && !stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::shared_ptr<ServedEpoch> e = epochs.current();
    if (e == nullptr) continue;
    if (e.get() != seen) {
      seen = e.get();
      if (failed != nullptr && health != nullptr) health->SetReady(true);
    }
    if (failed != e.get() && !e->engine->health().ok()) {
      failed = e.get();
      const Status why = e->engine->health();
      // A trainer's hvd.shutdown() or the job's end stops every rank's engine: no error.
      if (e->engine->shut_down_in_order()) {
        KV_LOG(kInfo, kEngine, "engine shut down: %s", why.message().c_str());
      } else {
        KV_LOG(kError, kEngine, "engine stopped: %s", why.ToString().c_str());
      }
      if (health != nullptr) health->SetReady(false, why.ToString());
    }
  }
}

int ServeRank(const SidecarConfig& cfg, SidecarDevice& device, const std::atomic<bool>& stop);

int Main() {
  // Signals are taken synchronously by the main thread (sigtimedwait); block them before any
  // thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Until the rank is known the lines say which program wrote them.
  logging::SetRole("korovod-sidecar");
  RaiseDescriptorLimit();
  logging::ConfigureFromEnvironment(logging::Subsystem::kSidecar);
  auto config = SidecarConfig::FromProcessEnvironment();
  if (!config.ok()) return Fail(config.status());
  const SidecarConfig& cfg = *config;
  // Elastic ranks change with each epoch: the worker is what stays.
  logging::SetRole(cfg.elastic()    ? "worker " + cfg.worker_id
                   : cfg.ranks == 1 ? "rank " + std::to_string(cfg.rank)
                                    : "ranks " + std::to_string(cfg.rank) + "-" +
                                          std::to_string(cfg.rank + cfg.ranks - 1));

  // Out of /proc/<pid>/environ, before any thread starts: unsetenv alone only drops the pointer,
  // and /proc/<pid>/environ reads the block the process started with, so the value's bytes there
  // are overwritten first (cfg holds the copy).
  if (char* key = ::getenv(env::kJobKey); key != nullptr) {
    std::memset(key, 0, std::strlen(key));
    ::unsetenv(env::kJobKey);
  }
  if (cfg.insecure_no_key) {
    KV_LOG(kError, kSidecar,
           "%s=1: NO JOB KEY. Peers are not authenticated: any process that reaches this "
           "sidecar's ports can join this job, feed it tensors or stop it. For debugging only.",
           env::kInsecureNoKey);
  }

  auto device = ChooseDeviceBackend(cfg.device_backend, cfg.shm_prefix);
  if (!device.ok()) return Fail(device.status());
  KV_LOG(kInfo, kSidecar, "device tensors: %s", device->description.c_str());

  // One thread per served rank; this one takes the signals. A rank that fails stops the others
  // (a pod is one unit: its worker fails as a whole).
  std::atomic<bool> stop{false};
  std::atomic<int> running{cfg.ranks};
  std::vector<int> codes(static_cast<size_t>(cfg.ranks), 0);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < cfg.ranks; ++i) {
      threads.emplace_back([&, i] {
        codes[static_cast<size_t>(i)] = ServeRank(cfg.ForRank(i), *device, stop);
        if (codes[static_cast<size_t>(i)] != 0) stop.store(true);
        running.fetch_sub(1);
      });
    }
    while (running.load() > 0) {
      timespec wait{0, 100 * 1000 * 1000};
      const int sig = ::sigtimedwait(&signals, nullptr, &wait);
      if (sig == SIGTERM || sig == SIGINT) stop.store(true);
    }
  }
  return *std::max_element(codes.begin(), codes.end());
}

// Everything a served rank keeps across epochs, and what starting an epoch needs.
struct RankContext {
  const SidecarConfig& cfg;
  const EngineConfig& engine_config;
  SidecarDevice& device;
  Arena& arena;
  EngineMetrics* metrics;
  MemoryInbox* memory;  // the memory channel's, for every epoch's op loop
};

// The world as configured, with the engine's connection settings and the arena to share.
StatusOr<WorldOptions> EpochWorld(const RankContext& rc) {
  KV_ASSIGN_OR_RETURN(WorldOptions world, WorldOptionsFrom(rc.cfg));
  world.collective_lanes = rc.engine_config.collective_lanes;  // connections are made per lane
  world.hierarchical = rc.engine_config.hierarchical;          // shared memory among a host's ranks
  world.wire_security = rc.engine_config.wire_security;        // records on the TCP connections
  // Ranks on one host map each other's arenas, so the engine reduces tensors in the arena
  // straight from the peers' mappings.
  world.shared_regions.push_back(
      {rc.arena.name(), rc.arena.base(), static_cast<size_t>(rc.arena.layout().total_bytes)});
  return world;
}

// The connected world's engine and op loop, as the epoch `e` (whose identity fields are set).
Status StartEpoch(const RankContext& rc, ConnectedWorld connected, const WorldOptions& world,
                  ServedEpoch& e) {
  e.transport = connected.comm->transport_name();
  e.listen_address = connected.comm->peer(e.rank).ToString();
  auto engine = Engine::Start(std::move(connected.comm), rc.engine_config, rc.device.backend);
  if (!engine.ok()) return engine.status();
  for (const LinkRate& r : connected.rates) {
    rc.metrics->SetPeerBandwidth(r.peer, r.bytes_per_second);
  }
  e.engine = std::move(engine).value();
  e.loop = std::make_unique<OpLoop>(
      *e.engine, rc.arena, rc.metrics, rc.device.api.get(),
      std::chrono::duration_cast<std::chrono::milliseconds>(world.op_timeout), rc.memory);
  e.loop->Start();
  return OkStatus();
}

// Static jobs: the one world, connected at start.
StatusOr<std::shared_ptr<ServedEpoch>> StaticEpoch(const RankContext& rc) {
  const SidecarConfig& cfg = rc.cfg;
  // Rendezvous, preflight, the mesh and the link probe all end by this one deadline.
  const Deadline start = Deadline::After(cfg.start_timeout);
  KV_ASSIGN_OR_RETURN(WorldOptions world, EpochWorld(rc));
  DiscoveredWorld discovered;  // owns the data listener in coordinator / world file mode
  if (cfg.peers.empty()) {
    KV_RETURN_IF_ERROR(DiscoverPeers(cfg, start, world, discovered));
  } else if (!cfg.iface.empty()) {
    KV_LOG(kWarning, kWorld, "%s=%s ignored: %s names every peer's address", env::kIface,
           cfg.iface.c_str(), env::kPeers);
  }
  KV_ASSIGN_OR_RETURN(ConnectedWorld connected, ConnectWorld(cfg, world, discovered, start));
  auto e = std::make_shared<ServedEpoch>();
  e->rank = cfg.rank;
  e->size = cfg.size;
  e->local_rank = cfg.local_rank;
  e->local_size = cfg.local_size;
  e->cross_rank = cfg.cross_rank;
  e->cross_size = cfg.cross_size;
  KV_RETURN_IF_ERROR(StartEpoch(rc, std::move(connected), world, *e));
  return e;
}

// Horovod's cross rank and size: the index of this rank's host among, and the number of, hosts
// that hold a rank at this rank's local index.
void SetPlacement(const HostLayout& layout, int rank, ServedEpoch& e) {
  e.local_rank = layout.local_rank(rank);
  e.local_size = layout.local_size(rank);
  e.cross_rank = 0;
  e.cross_size = 0;
  for (size_t h = 0; h < layout.hosts.size(); ++h) {
    if (static_cast<int>(layout.hosts[h].size()) <= e.local_rank) continue;
    if (static_cast<int>(h) == layout.host_of[static_cast<size_t>(rank)]) {
      e.cross_rank = e.cross_size;
    }
    ++e.cross_size;
  }
}

void RaiseFence(std::atomic<uint64_t>& fence, uint64_t token) {
  uint64_t now = fence.load();
  while (token > now && !fence.compare_exchange_weak(now, token)) {
  }
}

// Elastic jobs: the next epoch, from the membership server. Its rank and size are the server's.
// `fence` is the highest fencing token this worker met (a server below it is a deposed operator
// leader's): raised by every answer.
StatusOr<std::shared_ptr<ServedEpoch>> ElasticEpoch(const RankContext& rc, uint32_t last_epoch,
                                                    Deadline deadline,
                                                    std::atomic<uint64_t>& fence) {
  const SidecarConfig& cfg = rc.cfg;
  KV_ASSIGN_OR_RETURN(WorldOptions world, EpochWorld(rc));
  DiscoveryOptions d;
  d.elastic_server = cfg.elastic_server;
  d.worker = cfg.worker_id;
  d.last_epoch = last_epoch;
  d.host_name = cfg.host_name;
  d.iface = cfg.iface;
  d.job_key = world.job_key;
  d.data_port = static_cast<uint16_t>(cfg.data_port);
  d.timeout = std::chrono::milliseconds(std::max(1, deadline.RemainingMs()));
  d.min_token = fence.load();
  KV_LOG(kInfo, kWorld, "worker %s: joining membership epoch %u", cfg.worker_id.c_str(),
         last_epoch + 1);
  KV_ASSIGN_OR_RETURN(DiscoveredWorld discovered, DiscoverWorld(d));
  RaiseFence(fence, discovered.token);
  ApplyDiscoveredWorld(discovered, world);
  // korovodrun's virtual hosts: the registered host names say which ranks share a host.
  if (!cfg.host_name.empty()) {
    world.hosts.clear();
    for (const RankEntry& r : discovered.ranks) world.hosts.push_back(r.host_name);
  }
  const Deadline start = Deadline::After(cfg.start_timeout);
  world.connect_timeout = cfg.start_timeout;
  SidecarConfig named = cfg;
  named.rank = discovered.rank;
  KV_ASSIGN_OR_RETURN(ConnectedWorld connected, ConnectWorld(named, world, discovered, start));
  auto e = std::make_shared<ServedEpoch>();
  e->epoch = discovered.epoch;
  e->formed_version = discovered.formed_version;
  e->rank = discovered.rank;
  e->size = static_cast<int>(discovered.ranks.size());
  SetPlacement(connected.comm->host_layout(), e->rank, *e);
  KV_RETURN_IF_ERROR(StartEpoch(rc, std::move(connected), world, *e));
  KV_LOG(kInfo, kWorld, "korovod: worker %s joined membership epoch %u as rank %d of %d",
         cfg.worker_id.c_str(), e->epoch, e->rank, e->size);
  return e;
}

// One rank: its arena, its epochs (engine per world), its trainer's socket; returns its exit
// status.
int ServeRank(const SidecarConfig& cfg, SidecarDevice& device, const std::atomic<bool>& stop) {
  auto engine_config = EngineConfig::FromProcessEnvironment();
  if (!engine_config.ok()) return Fail(engine_config.status());

  ArenaSizes sizes;
  sizes.client_heap_bytes = uint64_t(cfg.arena_heap_max_mib) << 20;
  sizes.result_heap_bytes = uint64_t(cfg.arena_heap_max_mib) << 20;
  sizes.heap_reserve_bytes = uint64_t(cfg.arena_heap_mib) << 20;
  auto arena = Arena::Create(cfg.arena_name(), sizes);
  if (!arena.ok()) return Fail(arena.status());

  http::MetricsRegistry registry;
  auto metrics = EngineMetrics::Create(registry);
  if (!metrics.ok()) return Fail(metrics.status());
  MemoryInbox memory_inbox;  // outlives the epochs' op loops and the channel
  const RankContext rc{cfg, *engine_config, device, **arena, metrics->get(), &memory_inbox};

  std::unique_ptr<RankEpochs> epochs;
  std::atomic<uint64_t> fence{0};  // outlives `epochs`, whose watch reads it
  if (cfg.elastic()) {
    epochs = std::make_unique<RankEpochs>(
        [&rc, &fence](uint32_t last, Deadline d) { return ElasticEpoch(rc, last, d, fence); },
        [&cfg, &fence, key = WorldOptionsFrom(cfg)](const MembershipQuery& query,
                                                    Deadline d) -> StatusOr<MembershipVersion> {
          if (!key.ok()) return key.status();
          MembershipQuery q = query;
          q.min_token = fence.load();
          auto v = QueryMembership(*cfg.elastic_server, key->job_key, q, d);
          if (v.ok()) RaiseFence(fence, v->token);
          return v;
        });
  } else {
    auto only = StaticEpoch(rc);
    if (!only.ok()) return Fail(only.status().WithSubject("rank " + std::to_string(cfg.rank)));
    epochs = std::make_unique<RankEpochs>(std::move(only).value());
  }

  EngineMetrics* metrics_ptr = metrics->get();
  RankEpochs* epochs_ptr = epochs.get();
  auto health = ServeHealth(cfg, registry, [metrics_ptr, epochs_ptr] {
    if (auto e = epochs_ptr->current()) metrics_ptr->UpdateFromStats(e->engine->stats());
  });
  if (!health.ok()) {
    epochs->EndCurrent();
    return Fail(health.status());
  }

  std::atomic<bool> shutdown_requested{false};
  SidecarService service(cfg, *epochs, (*arena)->name(), (*arena)->layout().total_bytes,
                         [&shutdown_requested](const std::string& reason) {
                           KV_LOG(kInfo, kSidecar, "shutdown requested by the trainer%s%s",
                                  reason.empty() ? "" : ": ", reason.c_str());
                           shutdown_requested.store(true);
                         });
  service.set_device_backend(device.kind, device.nccl_version);
  // Device memory without an IPC handle crosses as descriptors, on a socket beside the gRPC one;
  // made first, so the gRPC socket (the readiness signal) still means everything is up.
  std::unique_ptr<MemoryChannel> memory_channel;
  if (device.api != nullptr) {
    auto channel = MemoryChannel::Start(MemoryChannel::PathFor(cfg.socket_path), memory_inbox);
    if (!channel.ok()) {
      epochs->EndCurrent();
      return Fail(channel.status());
    }
    memory_channel = std::move(channel).value();
    service.set_memory_channel(MemoryChannel::PathFor(cfg.socket_path), &memory_inbox);
  }
  std::unique_ptr<grpc::Server> server = ServeTrainers(cfg.socket_path, service);
  if (server == nullptr) {
    epochs->EndCurrent();
    return Fail(Unavailable("cannot serve gRPC on unix socket " + cfg.socket_path));
  }

  if (cfg.elastic()) {
    KV_LOG(kInfo, kSidecar,
           "worker %s on %s: elastic, membership server %s, socket %s, arena %s (%llu bytes), "
           "metrics port %d",
           cfg.worker_id.c_str(), LocalHostName().c_str(), cfg.elastic_server->ToString().c_str(),
           cfg.socket_path.c_str(), (*arena)->name().c_str(),
           static_cast<unsigned long long>((*arena)->layout().total_bytes),
           *health ? (*health)->port() : -1);
  } else {
    std::shared_ptr<ServedEpoch> only = epochs->current();
    KV_LOG(kInfo, kSidecar,
           "rank %d/%d on %s: transport %s, listening on %s, %d peers, socket %s, arena %s (%llu "
           "bytes), metrics port %d",
           cfg.rank, cfg.size, LocalHostName().c_str(), only->transport.c_str(),
           only->listen_address.c_str(), cfg.size - 1, cfg.socket_path.c_str(),
           (*arena)->name().c_str(),
           static_cast<unsigned long long>((*arena)->layout().total_bytes),
           *health ? (*health)->port() : -1);
  }

  WaitForShutdown(stop, shutdown_requested, *epochs, health->get());

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (auto e = epochs->current()) LogEndOfRun(e->rank, *e->engine);
  epochs->EndCurrent();
  memory_channel.reset();
  ::unlink(cfg.socket_path.c_str());
  if (*health) (*health)->Stop();
  return 0;
}

}  // namespace
}  // namespace korovod::sidecar

int main() { return korovod::sidecar::Main(); }
