// korovod-sidecar: hosts the collective engine for one rank and serves its trainer over a unix
// socket (gRPC control plane) and a shared-memory arena (tensors and op queues). Configured by the
// environment (sidecar/launcher/README.md); SIGTERM/SIGINT stop it cleanly.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "runtime/core/engine.h"
#include "runtime/core/engine_config.h"
#include "runtime/world/communicator.h"
#include "sidecar/daemon/op_loop.h"
#include "sidecar/daemon/sidecar_config.h"
#include "sidecar/daemon/sidecar_service.h"
#include "sidecar/http/engine_metrics.h"
#include "sidecar/http/health_server.h"
#include "sidecar/http/metrics_registry.h"
#include "sidecar/protocol/arena.h"

namespace korovod::sidecar {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "korovod-sidecar: %s\n", s.ToString().c_str());
  return 1;
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

int Main() {
  // Signals are taken synchronously by the main thread (sigtimedwait); block them before any
  // thread starts so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto config = SidecarConfig::FromProcessEnvironment();
  if (!config.ok()) return Fail(config.status());
  const SidecarConfig& cfg = *config;

  WorldOptions world;
  world.rank = cfg.rank;
  world.peers = cfg.peers;
  world.listen_fd = cfg.listen_fd;
  world.connect_timeout = cfg.start_timeout;
  if (!cfg.job_key_file.empty()) {
    auto key = ReadJobKeyFile(cfg.job_key_file);
    if (!key.ok()) return Fail(key.status());
    world.job_key = *key;
  }
  auto engine_config = EngineConfig::FromProcessEnvironment();
  if (!engine_config.ok()) return Fail(engine_config.status());

  auto comm = Communicator::Create(world);
  if (!comm.ok()) return Fail(comm.status().WithContext("rank " + std::to_string(cfg.rank)));
  const std::string transport = (*comm)->transport_name();
  auto engine = Engine::Start(std::move(*comm), *engine_config);
  if (!engine.ok()) return Fail(engine.status());

  ArenaSizes sizes;
  sizes.client_heap_bytes = uint64_t(cfg.arena_heap_mib) << 20;
  sizes.result_heap_bytes = uint64_t(cfg.arena_heap_mib) << 20;
  auto arena = Arena::Create(cfg.arena_name(), sizes);
  if (!arena.ok()) {
    (*engine)->Shutdown();
    return Fail(arena.status());
  }

  MetricsRegistry registry;
  auto metrics = EngineMetrics::Create(registry);
  if (!metrics.ok()) return Fail(metrics.status());
  EngineMetrics* metrics_ptr = metrics->get();
  Engine* engine_ptr = engine->get();
  std::unique_ptr<HealthServer> health;
  if (cfg.metrics_port >= 0) {
    HealthServerOptions opts;
    opts.port = cfg.metrics_port;
    opts.registry = &registry;
    opts.before_scrape = [metrics_ptr, engine_ptr] {
      metrics_ptr->UpdateFromStats(engine_ptr->stats());
    };
    auto server = HealthServer::Start(std::move(opts));
    if (!server.ok()) {
      (*engine)->Shutdown();
      return Fail(server.status().WithContext("KOROVOD_METRICS_PORT"));
    }
    health = std::move(*server);
    health->SetReady(true);
  }

  OpLoop loop(**engine, **arena, metrics_ptr);
  loop.Start();

  std::atomic<bool> shutdown_requested{false};
  SidecarService service(cfg, **engine, loop, (*arena)->name(), (*arena)->layout().total_bytes,
                         [&shutdown_requested, &cfg](const std::string& reason) {
                           std::fprintf(stderr,
                                        "korovod-sidecar: rank %d: shutdown requested by the "
                                        "trainer%s%s\n",
                                        cfg.rank, reason.empty() ? "" : ": ", reason.c_str());
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

  std::fprintf(stderr,
               "korovod-sidecar: rank %d/%d on %s: transport %s, listening on %s, %d peers, "
               "socket %s, arena %s (%llu bytes), metrics port %d\n",
               cfg.rank, cfg.size, HostName().c_str(), transport.c_str(),
               cfg.peers[cfg.rank].ToString().c_str(), cfg.size - 1, cfg.socket_path.c_str(),
               (*arena)->name().c_str(),
               static_cast<unsigned long long>((*arena)->layout().total_bytes),
               health ? health->port() : -1);

  bool engine_failed = false;
  while (!shutdown_requested.load()) {
    timespec wait{0, 100 * 1000 * 1000};
    const int sig = ::sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) break;
    if (!engine_failed && !(*engine)->health().ok()) {
      engine_failed = true;
      std::fprintf(stderr, "korovod-sidecar: rank %d: engine stopped: %s\n", cfg.rank,
                   (*engine)->health().ToString().c_str());
      if (health) health->SetReady(false, (*engine)->health().ToString());
    }
  }

  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  loop.Stop();
  (*engine)->Shutdown();
  ::unlink(cfg.socket_path.c_str());
  if (health) health->Stop();
  return 0;
}

}  // namespace
}  // namespace korovod::sidecar

int main() { return korovod::sidecar::Main(); }
