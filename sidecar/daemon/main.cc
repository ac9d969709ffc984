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
#include <ctime>
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
#include "sidecar/daemon/op_loop.h"
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
  world.shm_prefix = cfg.shm_prefix;  // korovodrun unlinks the job's prefix if a rank is killed
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
  if (!comm.ok()) return comm.status().WithContext(me);
  discovered.listener.Reset();  // every peer is connected: nobody dials this rank any more
  const Deadline probe_deadline(std::max(start.at(), Clock::now() + std::chrono::seconds(5)));
  auto rates = ProbeRingLinks(**comm, kLinkProbeBytes, probe_deadline);
  if (!rates.ok()) return rates.status().WithContext(me);
  auto interfaces = ListInterfaces();
  KV_LOG(kInfo, kWorld, "%s",
         FormatStartupSummary(**comm, *rates,
                              interfaces.ok() ? *interfaces : std::vector<NetInterface>{},
                              LocalHostName())
             .c_str());
  return ConnectedWorld{std::move(*comm), std::move(*rates)};
}

// /healthz, /readyz and /metrics on KOROVOD_METRICS_PORT (null when it is negative: off).
StatusOr<std::unique_ptr<http::HealthServer>> ServeHealth(const SidecarConfig& cfg,
                                                          http::MetricsRegistry& registry,
                                                          EngineMetrics* metrics, Engine* engine) {
  if (cfg.metrics_port < 0) return std::unique_ptr<http::HealthServer>();
  http::HealthServerOptions opts;
  opts.port = cfg.metrics_port;
  opts.registry = &registry;
  opts.before_scrape = [metrics, engine] { metrics->UpdateFromStats(engine->stats()); };
  auto server = http::HealthServer::Start(std::move(opts));
  if (!server.ok()) return server.status().WithContext(env::kMetricsPort);
  (*server)->SetReady(true);
  return std::move(*server);
}

// The trainers' gRPC socket. The socket file is korovodrun's readiness signal: it is created
// with its final mode (0660), so nobody sees it before it is usable.
std::unique_ptr<grpc::Server> ServeTrainers(const std::string& socket_path,
                                            SidecarService& service) {
  ::unlink(socket_path.c_str());  // a stale socket of an earlier run
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
// Shutdown; an engine failure turns /readyz red and is logged once, and the sidecar stays up so
// that trainers get the error with their ops.
void WaitForShutdown(const std::atomic<bool>& stop, const std::atomic<bool>& shutdown_requested,
                     Engine& engine, http::HealthServer* health) {
  bool engine_failed = false;
  while (!shutdown_requested.load() && !stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!engine_failed && !engine.health().ok()) {
      engine_failed = true;
      KV_LOG(kError, kEngine, "engine stopped: %s", engine.health().ToString().c_str());
      if (health != nullptr) health->SetReady(false, engine.health().ToString());
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
  logging::SetRole(cfg.ranks == 1 ? "rank " + std::to_string(cfg.rank)
                                  : "ranks " + std::to_string(cfg.rank) + "-" +
                                        std::to_string(cfg.rank + cfg.ranks - 1));

  // Out of /proc/<pid>/environ's reach for anything we start; before any thread reads the
  // environment.
  if (!cfg.job_key.empty()) ::unsetenv(env::kJobKey);

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

// One rank: its arena, its world, its engine, its trainer's socket; returns its exit status.
int ServeRank(const SidecarConfig& cfg, SidecarDevice& device, const std::atomic<bool>& stop) {
  // Rendezvous, preflight, the mesh and the link probe all end by this one deadline.
  const Deadline start = Deadline::After(cfg.start_timeout);
  auto world = WorldOptionsFrom(cfg);
  if (!world.ok()) return Fail(world.status());
  auto engine_config = EngineConfig::FromProcessEnvironment();
  if (!engine_config.ok()) return Fail(engine_config.status());
  world->collective_lanes = engine_config->collective_lanes;  // connections are made per lane
  world->hierarchical = engine_config->hierarchical;          // shared memory among a host's ranks

  // Before the world connects: ranks on one host map each other's arenas there, so the engine
  // reduces tensors in the arena straight from the peers' mappings.
  ArenaSizes sizes;
  sizes.client_heap_bytes = uint64_t(cfg.arena_heap_max_mib) << 20;
  sizes.result_heap_bytes = uint64_t(cfg.arena_heap_max_mib) << 20;
  sizes.heap_reserve_bytes = uint64_t(cfg.arena_heap_mib) << 20;
  auto arena = Arena::Create(cfg.arena_name(), sizes);
  if (!arena.ok()) return Fail(arena.status());
  world->shared_regions.push_back(
      {(*arena)->name(), (*arena)->base(), static_cast<size_t>((*arena)->layout().total_bytes)});

  DiscoveredWorld discovered;  // owns the data listener in coordinator / world file mode
  if (cfg.peers.empty()) {
    Status found = DiscoverPeers(cfg, start, *world, discovered);
    if (!found.ok()) return Fail(found);
  } else if (!cfg.iface.empty()) {
    KV_LOG(kWarning, kWorld, "%s=%s ignored: %s names every peer's address", env::kIface,
           cfg.iface.c_str(), env::kPeers);
  }
  auto connected = ConnectWorld(cfg, *world, discovered, start);
  if (!connected.ok()) return Fail(connected.status());
  const std::vector<LinkRate> rates = connected->rates;
  const std::string transport = connected->comm->transport_name();
  const std::string listen_address = connected->comm->peer(cfg.rank).ToString();
  auto engine = Engine::Start(std::move(connected->comm), *engine_config, device.backend);
  if (!engine.ok()) return Fail(engine.status());

  http::MetricsRegistry registry;
  auto metrics = EngineMetrics::Create(registry);
  if (!metrics.ok()) return Fail(metrics.status());
  EngineMetrics* metrics_ptr = metrics->get();
  for (const LinkRate& r : rates) metrics_ptr->SetPeerBandwidth(r.peer, r.bytes_per_second);
  auto health = ServeHealth(cfg, registry, metrics_ptr, engine->get());
  if (!health.ok()) {
    (*engine)->Shutdown();
    return Fail(health.status());
  }

  OpLoop loop(**engine, **arena, metrics_ptr, device.api.get(),
              std::chrono::duration_cast<std::chrono::milliseconds>(world->op_timeout));
  loop.Start();

  std::atomic<bool> shutdown_requested{false};
  SidecarService service(cfg, **engine, loop, (*arena)->name(), (*arena)->layout().total_bytes,
                         [&shutdown_requested](const std::string& reason) {
                           KV_LOG(kInfo, kSidecar, "shutdown requested by the trainer%s%s",
                                  reason.empty() ? "" : ": ", reason.c_str());
                           shutdown_requested.store(true);
                         });
  service.set_device_backend(device.kind, device.nccl_version);
  std::unique_ptr<grpc::Server> server = ServeTrainers(cfg.socket_path, service);
  if (server == nullptr) {
    loop.Stop();
    (*engine)->Shutdown();
    return Fail(Unavailable("cannot serve gRPC on unix socket " + cfg.socket_path));
  }

  KV_LOG(kInfo, kSidecar,
         "rank %d/%d on %s: transport %s, listening on %s, %d peers, socket %s, arena %s (%llu "
         "bytes), metrics port %d",
         cfg.rank, cfg.size, LocalHostName().c_str(), transport.c_str(), listen_address.c_str(),
         cfg.size - 1, cfg.socket_path.c_str(), (*arena)->name().c_str(),
         static_cast<unsigned long long>((*arena)->layout().total_bytes),
         *health ? (*health)->port() : -1);

  WaitForShutdown(stop, shutdown_requested, **engine, health->get());

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  LogEndOfRun(cfg.rank, **engine);
  // Engine first: ops in flight fail and are answered while the op loop still serves the arena.
  (*engine)->Shutdown();
  loop.Stop();
  ::unlink(cfg.socket_path.c_str());
  if (*health) (*health)->Stop();
  return 0;
}

}  // namespace
}  // namespace korovod::sidecar

int main() { return korovod::sidecar::Main(); }
