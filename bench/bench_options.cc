#include "bench/bench_options.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "bench/bench_ops.h"
#include "common/env_settings.h"

namespace korovod::bench {
namespace {

// The peers' default grid (bench_common.h default_sizes()), so a bare run is comparable.
constexpr const char* kDefaultSizes = "4,64,1K,16K,256K,4M,64M";
// Crossover grid: every power of two from 4 B to 4 MiB, fine enough to place the switch within
// a factor of two; beyond 4 MiB the ring always wins (it moves 2(N-1)/N of the data, recursive
// doubling log2(N) times the data).
constexpr size_t kCrossoverMinBytes = 4;
constexpr size_t kCrossoverMaxBytes = 4 << 20;
// Crossover runs 2 algorithms x 21 sizes x 6 worlds; a shorter timed loop keeps it ~2 minutes.
constexpr double kCrossoverTargetS = 0.2;
// A world size above this is almost certainly a typo and would exhaust ports/processes.
constexpr int kMaxRanks = 256;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<double> ParseSeconds(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(v) || v <= 0) {
    return std::nullopt;
  }
  return v;
}

std::optional<int> ParseInt(std::string_view text) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<BenchOpKind> ParseOp(std::string_view name) {
  for (BenchOpKind op : {BenchOpKind::kAllreduce, BenchOpKind::kAllgather, BenchOpKind::kBroadcast,
                         BenchOpKind::kAlltoall, BenchOpKind::kReduceScatter}) {
    if (name == BenchOpName(op)) return op;
  }
  return std::nullopt;
}

// Largest integer up to which every integer is exactly representable in t, so that the
// verification patterns (small integer sums) cannot fail on a correct engine because of rounding.
double MaxExactInteger(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return 127;
    case DataType::kUint8:
      return 255;
    case DataType::kBFloat16:
      return 256;
    case DataType::kFloat16:
      return 2048;
    case DataType::kFloat32:
      return 16777216.0;
    case DataType::kInt32:
      return 2147483647.0;
    case DataType::kInt16:
      return 32767;
    case DataType::kUint16:
      return 65535;
    case DataType::kBool:  // refused at --dtype: sums of bools are logical ors
      return 1;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 9007199254740992.0;
  }
  return 0;
}

}  // namespace

const char* BenchOpName(BenchOpKind op) {
  switch (op) {
    case BenchOpKind::kAllreduce:
      return "allreduce";
    case BenchOpKind::kAllgather:
      return "allgather";
    case BenchOpKind::kBroadcast:
      return "broadcast";
    case BenchOpKind::kAlltoall:
      return "alltoall";
    case BenchOpKind::kReduceScatter:
      return "reducescatter";
  }
  return "unknown";
}

std::vector<std::string_view> SplitCsv(std::string_view csv) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos <= csv.size()) {
    size_t comma = csv.find(',', pos);
    std::string_view tok =
        csv.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (!tok.empty()) out.push_back(tok);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

const char* BenchViaName(BenchVia via) { return via == BenchVia::kSidecar ? "sidecar" : "inproc"; }

const char* TransportFlagName(TransportKind t) {
  switch (t) {
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kAuto:
      return "auto";
  }
  return "unknown";
}

const char* AlgoFlagName(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kAuto:
      return "auto";
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kRecursiveDoubling:
      return "rd";
    case AllreduceAlgorithm::kSharedMemory:
      return "shm";
    case AllreduceAlgorithm::kHierarchical:
      return "hier";
  }
  return "unknown";
}

std::optional<size_t> ParseSize(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !std::isfinite(v) || v < 0) return std::nullopt;
  std::string suffix = Lower(std::string_view(end));
  double mul = 0;
  if (suffix.empty() || suffix == "b") {
    mul = 1;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    mul = 1024.0;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    mul = 1024.0 * 1024;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    mul = 1024.0 * 1024 * 1024;
  } else {
    return std::nullopt;
  }
  double bytes = v * mul;
  // A fractional byte count ("1.3") is a typo, not something to truncate silently.
  if (bytes != std::floor(bytes) || bytes > 1e15) return std::nullopt;
  return static_cast<size_t>(bytes);
}

std::optional<std::vector<size_t>> ParseSizeList(std::string_view csv, std::string* bad_token) {
  std::vector<size_t> out;
  for (std::string_view tok : SplitCsv(csv)) {
    std::optional<size_t> b = ParseSize(tok);
    if (!b) {
      *bad_token = std::string(tok);
      return std::nullopt;
    }
    out.push_back(*b);
  }
  if (out.empty()) {
    *bad_token = std::string(csv);
    return std::nullopt;
  }
  return out;
}

std::string UsageText() {
  return R"(usage: korovod-bench OP [flags]
       korovod-bench crossover [flags]

Starts the ranks itself on 127.0.0.1 (one forked process per rank) and prints one JSON row per
(transport, world size, message size) on stdout, following the peers' protocol
(verify, estimate, warm-up, timed median, back-to-back loop, verify again).

OP: allreduce | allgather | broadcast | alltoall | reducescatter
crossover: allreduce with recursive doubling and ring side by side, 4 B .. 4 MiB, N=2,3,4 on
           shm and tcp; prints where the ring becomes faster (summary on stderr).

flags:
  --ranks LIST        world sizes, e.g. 2,4 (default 2,4; crossover 2,3,4)
  --sizes LIST        message sizes in bytes, suffixes K/M/G (binary), e.g. 4,4M,64M
                      (default $SIZES, else 4,64,1K,16K,256K,4M,64M; crossover 4..4M by x2)
  --transport LIST    shm | tcp, or a comma list (default shm; crossover shm,tcp)
  --via LIST          inproc | sidecar, or a comma list (default inproc): sidecar runs every
                      rank's ops through its own korovod-sidecar process with the C++ client,
                      tensors in the shared-memory arena; rows say e.g. "shm+sidecar"
  --sidecar-binary P  korovod-sidecar for --via sidecar (default: next to korovod-bench)
  --wire-security L   none | integrity | encrypt, or a comma list (default none): TCP records
                      authenticated / encrypted (KOROVOD_WIRE_SECURITY); each world is run once
                      per mode, back to back; rows say e.g. "tcp+encrypt"
  --target-time S     seconds of timed loop per size (default $TARGET_TIME, else 0.7;
                      crossover 0.2)
  --algo A            allreduce algorithm: auto | ring | rd (recursive doubling) |
                      shm (through the shared-memory windows); default auto
  --dtype T           float32 (default), float64, float16, bfloat16, int32, int64, int8, uint8
  --min-iters K       minimum timed iterations (default 5)
  --max-iters K       maximum timed / loop iterations (default 200000)
  --no-loop           skip the back-to-back loop
  --table             print a readable table on stdout instead of JSON rows
  --timeout S         kill every rank when one world size takes longer (default: from sizes)
  --join RANK         be rank RANK of a world started elsewhere, one korovod-bench per rank
                      (e.g. in network namespaces); needs --peers, one --transport, --via
                      inproc; rank 0 prints the rows
  --peers LIST        with --join: every rank's IP:PORT, in rank order
  --hosts LIST        with --join: the host each rank counts as (equal names share a host:
                      shared memory inside, hierarchical allreduce with --algo hier)
  --job-key-file F    with --join: the world's key, the same file for every rank
  --hierarchy H       with --join: auto (default) | on | off: the world's hierarchical
                      collectives (off measures the flat allgather and broadcast)
  --help

exit status: 0 ok, 1 a rank failed or hung (the message names it), 2 bad usage,
             3 a verification failed (the row carries "error").
)";
}

std::optional<BenchOptions> ParseArgs(int argc, char** argv, UsageError* error, bool* help) {
  *help = false;
  auto fail = [&](std::string msg) -> std::optional<BenchOptions> {
    error->message = std::move(msg);
    return std::nullopt;
  };
  if (argc < 2) return fail("missing OP");
  std::string_view first = argv[1];
  if (first == "--help" || first == "-h") {
    *help = true;
    return std::nullopt;
  }

  BenchOptions o;
  o.vias = {BenchVia::kInproc};
  if (first == "crossover") {
    o.crossover = true;
  } else if (auto op = ParseOp(first)) {
    o.op = *op;
  } else {
    return fail("unknown OP '" + std::string(first) +
                "' (expected allreduce, allgather, broadcast, alltoall, reducescatter or "
                "crossover)");
  }

  // Defaults, then the harness's environment (bench_common.h reads the same variables), then
  // flags: the --extra hook of run_peers.sh exports SIZES/TARGET_TIME for every engine.
  std::string bad;
  if (o.crossover) {
    o.ranks = {2, 3, 4};
    o.transports = {TransportKind::kShm, TransportKind::kTcp};
    o.target_s = kCrossoverTargetS;
    for (size_t b = kCrossoverMinBytes; b <= kCrossoverMaxBytes; b *= 2) o.sizes.push_back(b);
  } else {
    o.ranks = {2, 4};
    o.transports = {TransportKind::kShm};
    // The peers harness's variables (not KOROVOD_*): a value other than the default is logged.
    const EnvSettings env(ProcessGetenv(), logging::Subsystem::kBench);
    const std::string sizes = env.String("SIZES", kDefaultSizes).value();  // String cannot fail
    auto parsed = ParseSizeList(sizes, &bad);
    if (!parsed) return fail("bad size '" + bad + "' in $SIZES");
    o.sizes = *parsed;
    auto target = env.Number("TARGET_TIME", o.target_s, 1e-9, 1e9, "expected positive seconds");
    if (!target.ok()) return fail(target.status().message());
    o.target_s = *target;
  }

  for (int i = 2; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string_view value;
    auto need_value = [&]() -> bool {
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    if (a == "--help" || a == "-h") {
      *help = true;
      return std::nullopt;
    } else if (a == "--no-loop") {
      o.loop = false;
      continue;
    } else if (a == "--table") {
      o.table = true;
      continue;
    }
    if (a != "--ranks" && a != "--sizes" && a != "--transport" && a != "--target-time" &&
        a != "--algo" && a != "--dtype" && a != "--min-iters" && a != "--max-iters" &&
        a != "--timeout" && a != "--via" && a != "--sidecar-binary" && a != "--join" &&
        a != "--peers" && a != "--hosts" && a != "--job-key-file" && a != "--hierarchy" &&
        a != "--wire-security") {
      return fail("unknown flag '" + std::string(a) + "'");
    }
    if (!need_value()) return fail("missing value for " + std::string(a));

    if (a == "--ranks") {
      o.ranks.clear();
      for (std::string_view tok : SplitCsv(value)) {
        auto n = ParseInt(tok);
        if (!n || *n < 1 || *n > kMaxRanks) {
          return fail("bad world size '" + std::string(tok) + "' in --ranks (1.." +
                      std::to_string(kMaxRanks) + ")");
        }
        o.ranks.push_back(*n);
      }
      if (o.ranks.empty()) return fail("--ranks is empty");
    } else if (a == "--sizes") {
      auto parsed = ParseSizeList(value, &bad);
      if (!parsed) return fail("bad size '" + bad + "' in --sizes (e.g. 4,64,1K,4M,64M)");
      o.sizes = *parsed;
    } else if (a == "--transport") {
      auto t = ParseChoiceList<TransportKind>(
          value, {{"shm", TransportKind::kShm}, {"tcp", TransportKind::kTcp}}, &bad);
      if (!t) {
        return fail(bad.empty() ? "--transport is empty"
                                : "bad transport '" + bad + "' (shm or tcp)");
      }
      o.transports = *t;
    } else if (a == "--via") {
      auto v = ParseChoiceList<BenchVia>(
          value, {{"inproc", BenchVia::kInproc}, {"sidecar", BenchVia::kSidecar}}, &bad);
      if (!v) {
        return fail(bad.empty() ? "--via is empty" : "bad --via '" + bad + "' (inproc or sidecar)");
      }
      o.vias = *v;
    } else if (a == "--wire-security") {
      auto w = ParseChoiceList<WireSecurity>(value,
                                             {{"none", WireSecurity::kNone},
                                              {"integrity", WireSecurity::kIntegrity},
                                              {"encrypt", WireSecurity::kEncrypt}},
                                             &bad);
      if (!w) {
        return fail(bad.empty() ? "--wire-security is empty"
                                : "bad --wire-security '" + bad + "' (none, integrity, encrypt)");
      }
      o.wire_modes = *w;
    } else if (a == "--sidecar-binary") {
      o.sidecar_binary = std::string(value);
    } else if (a == "--join") {
      auto k = ParseInt(value);
      if (!k || *k < 0) return fail("bad --join '" + std::string(value) + "' (a rank >= 0)");
      o.join_rank = *k;
    } else if (a == "--peers") {
      o.join_peers.clear();
      for (std::string_view tok : SplitCsv(value)) {
        const size_t colon = tok.rfind(':');
        auto port =
            colon == std::string_view::npos ? std::nullopt : ParseInt(tok.substr(colon + 1));
        if (!port || *port < 1 || *port > 65535 || colon == 0) {
          return fail("bad peer '" + std::string(tok) + "' in --peers (IP:PORT)");
        }
        o.join_peers.push_back({std::string(tok.substr(0, colon)), static_cast<uint16_t>(*port)});
      }
    } else if (a == "--hosts") {
      o.join_hosts.clear();
      for (std::string_view tok : SplitCsv(value)) o.join_hosts.emplace_back(tok);
    } else if (a == "--job-key-file") {
      o.job_key_file = std::string(value);
    } else if (a == "--hierarchy") {
      if (value == "auto") {
        o.hierarchy = HierarchyMode::kAuto;
      } else if (value == "on") {
        o.hierarchy = HierarchyMode::kOn;
      } else if (value == "off") {
        o.hierarchy = HierarchyMode::kOff;
      } else {
        return fail("bad --hierarchy '" + std::string(value) + "' (auto, on or off)");
      }
    } else if (a == "--target-time" || a == "--timeout") {
      auto s = ParseSeconds(value);
      if (!s) return fail("bad " + std::string(a) + " '" + std::string(value) + "' (seconds > 0)");
      (a == "--target-time" ? o.target_s : o.timeout_s) = *s;
    } else if (a == "--algo") {
      if (value == "auto") {
        o.algo = AllreduceAlgorithm::kAuto;
      } else if (value == "ring") {
        o.algo = AllreduceAlgorithm::kRing;
      } else if (value == "rd" || value == "recursive_doubling") {
        o.algo = AllreduceAlgorithm::kRecursiveDoubling;
      } else if (value == "shm" || value == "shared_memory") {
        o.algo = AllreduceAlgorithm::kSharedMemory;
      } else if (value == "hier" || value == "hierarchical") {
        o.algo = AllreduceAlgorithm::kHierarchical;
      } else {
        return fail("bad --algo '" + std::string(value) + "' (auto, ring, rd, shm or hier)");
      }
      o.algo_given = true;
    } else if (a == "--dtype") {
      auto t = ParseDataType(value);
      if (!t || *t == DataType::kBool) {
        return fail("bad --dtype '" + std::string(value) +
                    "' (float32, float64, float16, bfloat16, int32, int64, int16, uint16, int8, "
                    "uint8; bool is not benchmarked: its sums are logical ors, which the "
                    "verification patterns do not model)");
      }
      o.dtype = *t;
    } else if (a == "--min-iters" || a == "--max-iters") {
      auto k = ParseInt(value);
      if (!k || *k < 1) return fail("bad " + std::string(a) + " '" + std::string(value) + "'");
      (a == "--min-iters" ? o.min_iters : o.max_iters) = *k;
    }
  }

  if (o.min_iters > o.max_iters) return fail("--min-iters is larger than --max-iters");
  if (o.join_rank >= 0) {
    const int n = static_cast<int>(o.join_peers.size());
    if (n == 0) return fail("--join needs --peers");
    if (o.join_rank >= n) {
      return fail("--join " + std::to_string(o.join_rank) + " is not a rank of the " +
                  std::to_string(n) + " in --peers");
    }
    if (!o.join_hosts.empty() && static_cast<int>(o.join_hosts.size()) != n) {
      return fail("--hosts names " + std::to_string(o.join_hosts.size()) + " hosts for " +
                  std::to_string(n) + " peers");
    }
    if (o.crossover || o.vias.size() != 1 || o.vias[0] != BenchVia::kInproc ||
        o.transports.size() != 1) {
      return fail("--join runs one world in process: one --transport, --via inproc, no crossover");
    }
    o.ranks = {n};
  } else if (!o.join_peers.empty() || !o.join_hosts.empty() || !o.job_key_file.empty() ||
             o.hierarchy != HierarchyMode::kAuto) {
    return fail("--peers, --hosts, --job-key-file and --hierarchy belong to --join");
  }
  if (o.algo_given && (o.crossover || o.op != BenchOpKind::kAllreduce)) {
    return fail("--algo applies to allreduce only");
  }
  const bool sidecar = std::find(o.vias.begin(), o.vias.end(), BenchVia::kSidecar) != o.vias.end();
  if (sidecar && o.crossover) {
    return fail("crossover compares the runtime's algorithms in process; it has no --via sidecar");
  }
  if (sidecar && o.algo != AllreduceAlgorithm::kAuto) {
    return fail("--algo " + std::string(AlgoFlagName(o.algo)) +
                " cannot apply through a sidecar (its engine picks the algorithm); use --via "
                "inproc");
  }
  if (o.crossover && o.dtype != DataType::kFloat32) {
    return fail("crossover measures float32 only (the default the runtime threshold is for)");
  }
  const size_t elem = DataTypeSize(o.dtype);
  for (size_t s : o.sizes) {
    if (s == 0 || s % elem != 0) {
      return fail("size " + std::to_string(s) + " is not a positive multiple of " +
                  std::to_string(elem) + " bytes (" + DataTypeName(o.dtype) + ")");
    }
  }
  for (int n : o.ranks) {
    if (MaxVerifyValue(o.op, n) > MaxExactInteger(o.dtype)) {
      return fail("N=" + std::to_string(n) + " is too large for " + BenchOpName(o.op) + " in " +
                  DataTypeName(o.dtype) + ": its verification values are not exact integers");
    }
  }
  return o;
}

}  // namespace korovod::bench
