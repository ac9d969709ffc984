// korovod-sidecar: hosts the collective engine for one rank and serves its trainer over a unix
// socket (gRPC control plane) and a shared-memory arena (tensors and op queues). Configured by the
// environment (launcher/README.md); SIGTERM/SIGINT stop it cleanly.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

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

// Bytes per timed round of the start-up link probe: a few MiB, well under a second per link.
constexpr size_t kLinkProbeBytes = 2 << 20;

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
  logging::ConfigureFromEnvironment(logging::Subsystem::kSidecar);
  auto config = SidecarConfig::FromProcessEnvironment();
  if (!config.ok()) return Fail(config.status());
  const SidecarConfig& cfg = *config;
  logging::SetRole("rank " + std::to_string(cfg.rank));

  // Rendezvous, preflight, the mesh and the link probe all end by this one deadline.
  const Deadline start = Deadline::After(cfg.start_timeout);
  WorldOptions world;
  world.rank = cfg.rank;
  world.peers = cfg.peers;
  world.listen_fd = cfg.listen_fd;
  world.connect_timeout = cfg.start_timeout;
  world.shm_prefix = cfg.shm_prefix;  // korovodrun unlinks the job's prefix if a rank is killed
  if (!cfg.job_key_file.empty()) {
    auto key = ReadJobKeyFile(cfg.job_key_file);
    if (!key.ok()) return Fail(key.status());
    world.job_key = *key;
  } else if (!cfg.job_key.empty()) {
    world.job_key = cfg.job_key;
    ::unsetenv(env::kJobKey);  // out of /proc/<pid>/environ's reach for anything we start
  }
  auto engine_config = EngineConfig::FromProcessEnvironment();
  if (!engine_config.ok()) return Fail(engine_config.status());

  DiscoveredWorld discovered;  // owns the data listener in coordinator / world file mode
  if (cfg.peers.empty()) {
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
    auto found = DiscoverWorld(d);
    if (!found.ok()) return Fail(found.status());
    discovered = std::move(found).value();
    ApplyDiscoveredWorld(discovered, world);
    world.connect_timeout = std::chrono::milliseconds(std::max(1, start.RemainingMs()));
  } else if (!cfg.iface.empty()) {
    KV_LOG(kWarning, kWorld, "%s=%s ignored: %s names every peer's address", env::kIface,
           cfg.iface.c_str(), env::kPeers);
  }

  auto comm = Communicator::Create(world);
  if (!comm.ok()) return Fail(comm.status().WithContext("rank " + std::to_string(cfg.rank)));
  discovered.listener.Reset();  // every peer is connected: nobody dials this rank any more
  const std::string transport = (*comm)->transport_name();
  const std::string listen_address = (*comm)->peer(cfg.rank).ToString();
  const Deadline probe_deadline(std::max(start.at(), Clock::now() + std::chrono::seconds(5)));
  auto rates = ProbeRingLinks(**comm, kLinkProbeBytes, probe_deadline);
  if (!rates.ok()) return Fail(rates.status().WithContext("rank " + std::to_string(cfg.rank)));
  auto interfaces = ListInterfaces();
  KV_LOG(kInfo, kWorld, "%s",
         FormatStartupSummary(**comm, *rates,
                              interfaces.ok() ? *interfaces : std::vector<NetInterface>{},
                              LocalHostName())
             .c_str());
  auto engine = Engine::Start(std::move(*comm), *engine_config);
  if (!engine.ok()) return Fail(engine.status());

  ArenaSizes sizes;
  sizes.client_heap_bytes = uint64_t(cfg.arena_heap_max_mib) << 20;
  sizes.result_heap_bytes = uint64_t(cfg.arena_heap_max_mib) << 20;
  sizes.heap_reserve_bytes = uint64_t(cfg.arena_heap_mib) << 20;
  auto arena = Arena::Create(cfg.arena_name(), sizes);
  if (!arena.ok()) {
    (*engine)->Shutdown();
    return Fail(arena.status());
  }

  http::MetricsRegistry registry;
  auto metrics = EngineMetrics::Create(registry);
  if (!metrics.ok()) return Fail(metrics.status());
  EngineMetrics* metrics_ptr = metrics->get();
  for (const LinkRate& r : *rates) metrics_ptr->SetPeerBandwidth(r.peer, r.bytes_per_second);
  Engine* engine_ptr = engine->get();
  std::unique_ptr<http::HealthServer> health;
  if (cfg.metrics_port >= 0) {
    http::HealthServerOptions opts;
    opts.port = cfg.metrics_port;
    opts.registry = &registry;
    opts.before_scrape = [metrics_ptr, engine_ptr] {
      metrics_ptr->UpdateFromStats(engine_ptr->stats());
    };
    auto server = http::HealthServer::Start(std::move(opts));
    if (!server.ok()) {
      (*engine)->Shutdown();
      return Fail(server.status().WithContext(env::kMetricsPort));
    }
    health = std::move(*server);
    health->SetReady(true);
  }

  OpLoop loop(**engine, **arena, metrics_ptr);
  loop.Start();

  std::atomic<bool> shutdown_requested{false};
  SidecarService service(cfg, **engine, loop, (*arena)->name(), (*arena)->layout().total_bytes,
                         [&shutdown_requested](const std::string& reason) {
                           KV_LOG(kInfo, kSidecar, "shutdown requested by the trainer%s%s",
                                  reason.empty() ? "" : ": ", reason.c_str());
                           shutdown_requested.store(true);
                         });
  ::unlink(cfg.socket_path.c_str());  // a stale socket of an earlier run
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + cfg.socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  // The socket file is korovodrun's readiness signal: create it with its final mode (0660), so
  // nobody sees it before it is usable.
  const mode_t old_umask = ::umask(0117);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ::umask(old_umask);
  if (server == nullptr) {
    loop.Stop();
    (*engine)->Shutdown();
    return Fail(Unavailable("cannot serve gRPC on unix socket " + cfg.socket_path));
  }
  ::chmod(cfg.socket_path.c_str(), 0660);

  KV_LOG(kInfo, kSidecar,
         "rank %d/%d on %s: transport %s, listening on %s, %d peers, socket %s, arena %s (%llu "
         "bytes), metrics port %d",
         cfg.rank, cfg.size, LocalHostName().c_str(), transport.c_str(), listen_address.c_str(),
         cfg.size - 1, cfg.socket_path.c_str(), (*arena)->name().c_str(),
         static_cast<unsigned long long>((*arena)->layout().total_bytes),
         health ? health->port() : -1);

  bool engine_failed = false;
  while (!shutdown_requested.load()) {
    timespec wait{0, 100 * 1000 * 1000};
    const int sig = ::sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) break;
    if (!engine_failed && !(*engine)->health().ok()) {
      engine_failed = true;
      KV_LOG(kError, kEngine, "engine stopped: %s", (*engine)->health().ToString().c_str());
      if (health) health->SetReady(false, (*engine)->health().ToString());
    }
  }

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  // Engine first: ops in flight fail and are answered while the op loop still serves the arena.
  (*engine)->Shutdown();
  loop.Stop();
  ::unlink(cfg.socket_path.c_str());
  if (health) health->Stop();
  return 0;
}

}  // namespace
}  // namespace korovod::sidecar

int main() { return korovod::sidecar::Main(); }
