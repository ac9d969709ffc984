// Command line of korovod-bench. Parsing happens in the parent before any rank is forked, so a
// bad flag costs no sockets or processes and is reported once (exit code 2).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/data_type.h"
#include "runtime/collectives/collectives.h"
#include "runtime/world/world.h"

namespace korovod::bench {

enum class BenchOpKind { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReduceScatter };

const char* BenchOpName(BenchOpKind op);

// Where a rank's collectives run: in its own process on a Communicator, or through its own
// korovod-sidecar with the C++ client (the rows' transport then reads "shm+sidecar").
enum class BenchVia { kInproc, kSidecar };

const char* BenchViaName(BenchVia via);  // "inproc", "sidecar"

struct BenchOptions {
  // Crossover mode: allreduce with recursive doubling and ring measured side by side per size.
  bool crossover = false;
  BenchOpKind op = BenchOpKind::kAllreduce;
  std::vector<int> ranks;
  std::vector<size_t> sizes;  // bytes as requested; ops may round (see RoundBytes)
  std::vector<TransportKind> transports;
  std::vector<BenchVia> vias;  // default: in process only
  // --wire-security: each world is measured once per mode, back to back (innermost), so the
  // modes' ratios come from one run; rows of a mode other than none say it ("tcp+encrypt").
  std::vector<WireSecurity> wire_modes = {WireSecurity::kNone};
  // --via sidecar: the korovod-sidecar binary; empty: the one next to korovod-bench.
  std::string sidecar_binary;
  double target_s = 0.7;  // same default as the peers (bench_common.h)
  int min_iters = 5;
  int max_iters = 200000;
  bool loop = true;
  bool table = false;  // human-readable table on stdout instead of JSON rows
  AllreduceAlgorithm algo = AllreduceAlgorithm::kAuto;
  bool algo_given = false;
  DataType dtype = DataType::kFloat32;
  // Backstop for the whole launch of one world size; 0 derives it from sizes and target time.
  double timeout_s = 0;
  // Join mode (--join RANK): this process is one rank of a world whose ranks are started
  // elsewhere (one korovod-bench per rank, e.g. in network namespaces), listening on
  // join_peers[RANK]; rank 0 prints the rows. join_hosts: the host each rank counts as
  // (WorldOptions::hosts); empty: from the addresses.
  int join_rank = -1;
  std::vector<PeerAddress> join_peers;
  std::vector<std::string> join_hosts;
  std::string job_key_file;  // the world's shared key (every rank reads the same file)
  // --hierarchy: the world's hierarchical collectives (WorldOptions::hierarchical); --algo hier
  // turns it on.
  HierarchyMode hierarchy = HierarchyMode::kAuto;
};

// Why parsing failed, phrased for the user; main prints it with the usage and exits 2.
struct UsageError {
  std::string message;
};

// Parses argv; std::nullopt with *error set on bad usage, and `*help` set for --help.
std::optional<BenchOptions> ParseArgs(int argc, char** argv, UsageError* error, bool* help);

std::string UsageText();

// "4", "64", "1K", "16KiB", "4M", "64MiB", "1G" -> bytes (binary units, like bench_common.h).
std::optional<size_t> ParseSize(std::string_view text);
std::optional<std::vector<size_t>> ParseSizeList(std::string_view csv, std::string* bad_token);

// "a,b,,c" -> {"a", "b", "c"}: empty tokens are dropped.
std::vector<std::string_view> SplitCsv(std::string_view csv);

// A comma list of names from `choices` ("shm,tcp") -> their values, in the list's order; nullopt
// for an unknown name (left in *bad_token) or an empty list (*bad_token empty).
template <typename E>
std::optional<std::vector<E>> ParseChoiceList(
    std::string_view csv, std::initializer_list<std::pair<std::string_view, E>> choices,
    std::string* bad_token) {
  std::vector<E> out;
  bad_token->clear();
  for (std::string_view tok : SplitCsv(csv)) {
    const auto* c = choices.begin();
    while (c != choices.end() && c->first != tok) ++c;
    if (c == choices.end()) {
      *bad_token = std::string(tok);
      return std::nullopt;
    }
    out.push_back(c->second);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

const char* TransportFlagName(TransportKind t);  // "shm", "tcp"
const char* AlgoFlagName(AllreduceAlgorithm a);  // "auto", "ring", "rd"

}  // namespace korovod::bench
