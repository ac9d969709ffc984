// korovod-bench: measures korovod's collectives with the peers' protocol and JSON schema, on
// ranks it forks itself on this host, in process or through sidecars (see bench/README.md).
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_ops.h"
#include "bench/bench_options.h"
#include "bench/inproc_world.h"
#include "bench/launcher.h"
#include "bench/protocol.h"
#include "bench/sidecar_job.h"
#include "bench/sidecar_world.h"
#include "common/env_names.h"
#include "common/env_settings.h"
#include "common/json_escape.h"
#include "common/log.h"
#include "runtime/transport/wire_security.h"
#include "runtime/world/communicator.h"
#include "runtime/world/world.h"
#include "sidecar/client/client.h"

namespace korovod::bench {
namespace {

// Rank 0 prints everything on stdout; every rank may print errors on stderr.
void RankError(int rank, const Status& s) {
  KV_LOG(kError, kBench, "rank %d: %s", rank, s.ToString().c_str());
}

RowLabels LabelsFor(const BenchWorld& world, const BenchOp& op, const BenchOptions& o,
                    AllreduceAlgorithm algo) {
  RowLabels l;
  l.transport = world.transport_label();
  l.ranks = world.size();
  // Only allreduce has a choice of algorithm; the other ops have one each in the runtime.
  l.algo = o.crossover || o.op == BenchOpKind::kAllreduce ? AlgoFlagName(algo) : "default";
  l.op = op.name();
  l.dtype = DataTypeName(o.dtype);
  l.bus_factor = op.BusFactor(world.size());
  l.inplace = op.inplace();
  l.loop = o.loop;
  return l;
}

void PrintRow(const std::string& row) {
  std::printf("%s\n", row.c_str());
  // The harness timestamps each row as it arrives (per-row noise accounting).
  std::fflush(stdout);
}

std::string HumanBytes(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

void PrintTableHeader(const RowLabels& l) {
  std::printf("\n%s %s, %d ranks, %s (median of barrier-aligned iterations, max over ranks)\n",
              l.op.c_str(), l.dtype.c_str(), l.ranks, l.transport.c_str());
  std::printf("| %10s | %12s | %12s | %11s | %11s | %8s |\n", "bytes", "time_us", "p90_us",
              "algbw GB/s", "busbw GB/s", "verified");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", "-----------:", "-------------:", "-------------:",
              "------------:", "------------:", "---------:");
}

std::string FormatTableRow(const RowLabels& l, const Measurement& m) {
  char buf[256];
  const double algbw = m.verified ? static_cast<double>(m.bytes) / m.median_s / 1e9 : 0;
  std::snprintf(buf, sizeof buf, "| %10s | %12.2f | %12.2f | %11.3f | %11.3f | %8s |",
                HumanBytes(m.bytes).c_str(), m.median_s * 1e6, m.p90_s * 1e6, algbw,
                algbw * l.bus_factor, m.verified ? "yes" : "FAILED");
  return buf;
}

struct CrossoverPoint {
  size_t bytes = 0;
  Measurement rd, ring;
};

// Prints the side-by-side table on stderr and one summary JSON line (no "peer" key, so the
// peers' harness ignores it) on stdout.
void ReportCrossover(const std::string& transport, int n,
                     const std::vector<CrossoverPoint>& points) {
  std::fprintf(stderr, "\ncrossover %s N=%d (median us per float32 allreduce)\n", transport.c_str(),
               n);
  std::fprintf(stderr,
               "| bytes | rd us | ring us | ring/rd | faster |\n|---:|---:|---:|---:|---|\n");
  // ring_from: the smallest size from which the ring wins at every larger measured size; a
  // single noisy win below it does not move the switch.
  size_t ring_from_index = points.size();
  size_t first_ring_win = 0;
  bool all_verified = true;
  for (size_t i = points.size(); i-- > 0;) {
    const auto& p = points[i];
    if (p.ring.verified && p.rd.verified && p.ring.median_s < p.rd.median_s) {
      if (ring_from_index == i + 1) ring_from_index = i;
    }
  }
  for (const auto& p : points) {
    all_verified = all_verified && p.rd.verified && p.ring.verified;
    const bool ring_wins = p.ring.median_s < p.rd.median_s;
    if (ring_wins && first_ring_win == 0) first_ring_win = p.bytes;
    std::fprintf(stderr, "| %s | %.1f | %.1f | %.2f | %s |\n", HumanBytes(p.bytes).c_str(),
                 p.rd.median_s * 1e6, p.ring.median_s * 1e6, p.ring.median_s / p.rd.median_s,
                 !(p.rd.verified && p.ring.verified) ? "verify failed"
                 : ring_wins                         ? "ring"
                                                     : "rd");
  }
  std::string js = "{\"crossover\": true, \"transport\": " + JsonQuoted(transport) +
                   ", \"ranks\": " + std::to_string(n) +
                   ", \"verified\": " + (all_verified ? "true" : "false");
  if (ring_from_index == points.size()) {
    std::fprintf(stderr, "%s N=%d: recursive doubling is faster up to the largest size (%s)\n",
                 transport.c_str(), n,
                 points.empty() ? "-" : HumanBytes(points.back().bytes).c_str());
    js += ", \"ring_faster_from_bytes\": null, \"rd_max_bytes\": " +
          std::to_string(points.empty() ? 0 : points.back().bytes);
  } else {
    const size_t ring_from = points[ring_from_index].bytes;
    const size_t rd_max = ring_from_index == 0 ? 0 : points[ring_from_index - 1].bytes;
    std::fprintf(stderr,
                 "%s N=%d: ring faster from %s on (first ring win at %s); recursive doubling "
                 "up to %s -> small_allreduce_max_bytes = %zu\n",
                 transport.c_str(), n, HumanBytes(ring_from).c_str(),
                 HumanBytes(first_ring_win).c_str(), HumanBytes(rd_max).c_str(), rd_max);
    js += ", \"ring_faster_from_bytes\": " + std::to_string(ring_from) +
          ", \"first_ring_win_bytes\": " + std::to_string(first_ring_win) +
          ", \"rd_max_bytes\": " + std::to_string(rd_max);
  }
  js += "}";
  PrintRow(js);
}

// One rank's whole run for one world (all sizes). Returns the rank's exit status.
int RunWorld(BenchWorld& world, const BenchOptions& o) {
  const int rank = world.rank();
  ProtocolOptions p;
  p.target_s = o.target_s;
  p.min_iters = o.min_iters;
  p.max_iters = o.max_iters;
  p.loop = o.loop;
  // Same switch as bench_common.h: set at all means inject.
  p.inject_fault = EnvSettings(ProcessGetenv(), logging::Subsystem::kBench)
                       .Find("PEERBENCH_INJECT_FAULT")
                       .has_value();

  int failures = 0;
  const bool root = rank == 0;
  if (o.crossover) {
    auto rd = MakeBenchOp(BenchOpKind::kAllreduce, world, o.dtype,
                          AllreduceAlgorithm::kRecursiveDoubling);
    auto ring = MakeBenchOp(BenchOpKind::kAllreduce, world, o.dtype, AllreduceAlgorithm::kRing);
    std::vector<CrossoverPoint> points;
    for (size_t bytes : o.sizes) {
      // Interleaved per size, so slow drift of the machine hits both algorithms alike.
      CrossoverPoint pt;
      pt.bytes = bytes;
      for (auto [op, m, algo] :
           {std::tuple{rd.get(), &pt.rd, AllreduceAlgorithm::kRecursiveDoubling},
            std::tuple{ring.get(), &pt.ring, AllreduceAlgorithm::kRing}}) {
        if (Status s = MeasureSize(world, *op, bytes, p, m); !s.ok()) {
          RankError(rank, s);
          return kExitRankFailed;
        }
        if (!m->verified) ++failures;
        if (root) PrintRow(FormatRow(LabelsFor(world, *op, o, algo), *m));
      }
      points.push_back(pt);
    }
    if (root) ReportCrossover(world.transport_label(), world.size(), points);
  } else {
    auto op = MakeBenchOp(o.op, world, o.dtype, o.algo);
    const RowLabels labels = LabelsFor(world, *op, o, o.algo);
    if (root && o.table) PrintTableHeader(labels);
    for (size_t requested : o.sizes) {
      Measurement m;
      if (Status s = MeasureSize(world, *op, op->RoundBytes(requested), p, &m); !s.ok()) {
        RankError(rank, s);
        return kExitRankFailed;
      }
      if (!m.verified) ++failures;
      if (root) PrintRow(o.table ? FormatTableRow(labels, m) : FormatRow(labels, m));
    }
  }
  // Nobody tears down its connections while a peer may still be finishing the last collective.
  if (Status s = world.Barrier(); !s.ok()) {
    RankError(rank, s.WithContext("final barrier"));
    return kExitRankFailed;
  }
  return failures != 0 ? kExitVerifyFailed : kExitOk;
}

// "" for none, "+integrity" / "+encrypt" otherwise: the rows' transport label.
std::string WireSuffix(WireSecurity mode) {
  return mode == WireSecurity::kNone ? "" : std::string("+") + WireSecurityName(mode);
}

int RunInprocRank(const BenchOptions& o, TransportKind transport, WireSecurity wire,
                  const std::string& job_key, int rank, int listen_fd,
                  const std::vector<PeerAddress>& peers) {
  WorldOptions w;
  w.rank = rank;
  w.peers = peers;
  w.listen_fd = listen_fd;
  w.job_key = job_key;
  w.transport = transport;
  w.wire_security = wire;
  w.hosts = o.join_hosts;
  w.hierarchical = o.algo == AllreduceAlgorithm::kHierarchical ? HierarchyMode::kOn : o.hierarchy;
  auto comm_or = Communicator::Create(w);
  if (!comm_or.ok()) {
    RankError(rank, comm_or.status().WithContext("creating the communicator"));
    return kExitRankFailed;
  }
  // Shared memory ignores the mode: its rows keep their plain label.
  InprocWorld world(*comm_or.value(), transport == TransportKind::kShm ? "" : WireSuffix(wire));
  return RunWorld(world, o);
}

// A trainer's view: only the sidecar's socket, as korovodrun gives it in KOROVOD_SOCKET.
int RunSidecarRank(const BenchOptions& o, const std::string& label, const std::string& socket,
                   int rank) {
  constexpr auto kConnectTimeout = std::chrono::seconds(30);
  // Like WorldOptions::op_timeout: a wait that outlives it names the op instead of hanging
  // until korovod-bench's --timeout.
  constexpr auto kOpTimeout = std::chrono::seconds(60);
  auto client = sidecar::Client::Connect(socket, kConnectTimeout, "korovod-bench");
  if (!client.ok()) {
    RankError(rank, client.status().WithContext("connecting to its sidecar"));
    return kExitRankFailed;
  }
  SidecarWorld world(std::move(*client), label, kOpTimeout);
  return RunWorld(world, o);
}

// Per-launch job key: every connection authenticates, so a stray process dialling our
// loopback ports cannot join a benchmark world.
std::string RandomJobKey() {
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 4; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", rd());
    key += buf;
  }
  return key;
}

double DefaultTimeout(const BenchOptions& o) {
  // Generous backstop (the runtime's own op timeout fires first on a dead peer): connection
  // setup, then per size and algorithm the protocol's ~1.5 T plus a fixed slack for the
  // verification and loop ops of large messages on a slow transport.
  const double per_size = 1.5 * o.target_s + 30.0;
  return 60.0 + per_size * static_cast<double>(o.sizes.size()) * (o.crossover ? 2 : 1);
}

LaunchOutcome LaunchInproc(const BenchOptions& o, TransportKind transport, WireSecurity wire, int n,
                           double timeout) {
  const std::string key = RandomJobKey();
  return LaunchRanks(n, timeout,
                     [&](int rank, int listen_fd, const std::vector<PeerAddress>& peers) {
                       return RunInprocRank(o, transport, wire, key, rank, listen_fd, peers);
                     });
}

// korovod-sidecar in korovod-bench's own directory (both are built into the same bin/).
std::string SiblingSidecar() {
  char self[PATH_MAX + 1] = {};
  const ssize_t len = ::readlink("/proc/self/exe", self, PATH_MAX);
  if (len <= 0) return "korovod-sidecar";
  const std::string path(self, static_cast<size_t>(len));
  return path.substr(0, path.rfind('/') + 1) + "korovod-sidecar";
}

// Arena heaps big enough for the largest op (its input in the client heap, an out-of-place
// output in the result heap) plus the protocol's per-iteration times (max-reduced as doubles).
int ArenaHeapMiB(const BenchOptions& o) {
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  const size_t times = static_cast<size_t>(o.max_iters) * sizeof(double);
  return static_cast<int>((largest + kMiB - 1) / kMiB + (times + kMiB - 1) / kMiB + 4);
}

LaunchOutcome LaunchThroughSidecars(const BenchOptions& o, const std::string& binary,
                                    TransportKind transport, WireSecurity wire, int n,
                                    double timeout) {
  // The sidecars inherit korovod-bench's environment (sidecar_job.h).
  ::setenv(env::kWireSecurity, WireSecurityName(wire), 1);
  const std::string label =
      TransportFlagName(transport) + (transport == TransportKind::kShm ? "" : WireSuffix(wire));
  SidecarJobOptions so;
  so.binary = binary;
  so.ranks = n;
  so.transport = transport;
  so.arena_heap_mib = ArenaHeapMiB(o);
  auto job = SidecarJob::Start(so);
  if (!job.ok()) return {kExitRankFailed, job.status().message()};
  SidecarJob& sidecars = **job;
  LaunchOutcome out = LaunchRanks(
      n, timeout,
      [&](int rank, int listen_fd, const std::vector<PeerAddress>&) {
        ::close(listen_fd);  // the sidecars hold the world's connections, not the ranks
        return RunSidecarRank(o, label, sidecars.socket(rank), rank);
      },
      [&] { return sidecars.Failures(); });
  if (out.exit_code == kExitRankFailed) {
    // A rank that failed because its sidecar died: say so, with the sidecar's log.
    if (std::string dead = sidecars.Failures();
        !dead.empty() && out.message.find(dead) == std::string::npos) {
      out.message += "; " + dead;
    }
    return out;  // ~SidecarJob kills the sidecars and removes their files
  }
  constexpr double kGraceS = 10;
  if (Status s = sidecars.Stop(kGraceS); !s.ok()) return {kExitRankFailed, s.message()};
  return out;
}

int Main(int argc, char** argv) {
  logging::SetRole("korovod-bench");
  logging::ConfigureFromEnvironment(logging::Subsystem::kBench);
  // An inherited SIG_IGN would make the kernel reap our ranks itself and hide their status.
  signal(SIGCHLD, SIG_DFL);
  UsageError error;
  bool help = false;
  std::optional<BenchOptions> parsed = ParseArgs(argc, argv, &error, &help);
  if (help) {
    std::fputs(UsageText().c_str(), stdout);
    return kExitOk;
  }
  if (!parsed) {
    KV_LOG(kError, kBench, "%s (korovod-bench --help for usage)", error.message.c_str());
    return kExitUsage;
  }
  const BenchOptions& o = *parsed;
  std::string sidecar_binary;
  if (std::find(o.vias.begin(), o.vias.end(), BenchVia::kSidecar) != o.vias.end()) {
    sidecar_binary = o.sidecar_binary.empty() ? SiblingSidecar() : o.sidecar_binary;
    if (::access(sidecar_binary.c_str(), X_OK) != 0) {
      KV_LOG(kError, kBench,
             "--via sidecar: no executable korovod-sidecar at %s (build the korovod-sidecar "
             "target, or pass --sidecar-binary PATH)",
             sidecar_binary.c_str());
      return kExitUsage;
    }
  }
  if (o.join_rank >= 0) {
    // One rank of a world started elsewhere: the runtime's own deadlines bound every wait.
    std::string key;
    if (!o.job_key_file.empty()) {
      std::ifstream in(o.job_key_file);
      if (!std::getline(in, key) || key.empty()) {
        KV_LOG(kError, kBench, "--job-key-file %s: cannot read a key from it",
               o.job_key_file.c_str());
        return kExitUsage;
      }
    }
    return RunInprocRank(o, o.transports[0], o.wire_modes[0], key, o.join_rank, -1,
                         o.join_peers);
  }
  const double timeout = o.timeout_s > 0 ? o.timeout_s : DefaultTimeout(o);
  const char* what = o.crossover ? "crossover" : BenchOpName(o.op);
  bool verify_failed = false;
  // Via and wire security innermost: the in-process and through-sidecar rows, and the wire
  // modes, of one world are measured back to back, so drift of the machine hits them alike.
  for (TransportKind transport : o.transports) {
    for (int n : o.ranks) {
      for (BenchVia via : o.vias) {
        for (WireSecurity wire : o.wire_modes) {
          LaunchOutcome out =
              via == BenchVia::kInproc
                  ? LaunchInproc(o, transport, wire, n, timeout)
                  : LaunchThroughSidecars(o, sidecar_binary, transport, wire, n, timeout);
          if (out.exit_code == kExitRankFailed) {
            KV_LOG(kError, kBench, "%s N=%d transport=%s%s%s failed: %s", what, n,
                   TransportFlagName(transport), WireSuffix(wire).c_str(),
                   via == BenchVia::kSidecar ? "+sidecar" : "", out.message.c_str());
            if (out.signal != 0) {
              // Everything of ours is gone by now; end the way the signal would have.
              std::fflush(nullptr);
              signal(out.signal, SIG_DFL);
              raise(out.signal);
            }
            return kExitRankFailed;
          }
          if (out.exit_code == kExitVerifyFailed) verify_failed = true;
        }
      }
    }
  }
  if (verify_failed) {
    KV_LOG(kError, kBench, "verification failed (see the rows with \"error\")");
    return kExitVerifyFailed;
  }
  return kExitOk;
}

}  // namespace
}  // namespace korovod::bench

int main(int argc, char** argv) { return korovod::bench::Main(argc, argv); }
