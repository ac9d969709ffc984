// korovod-test-rank: one rank of a test world as its own process (for the multi-host test).
//
//   korovod-test-rank --rank R --peers host:port,host:port,... [--transport tcp|shm|auto]
//                     [--check allreduce,allgather] [--job-key KEY]
//                     [--connect-timeout-ms MS] [--op-timeout-ms MS]
//
// Listens on peers[R] (all interfaces, that port), connects to the others, runs the checks and
// prints one line per check:
//   check <name> ok digest <16 hex digits>
// Every rank of a correct run prints the same digest for a check (the result is bit-identical on
// every rank). Exit status: 0 all checks passed, 1 a result was wrong, 2 a collective or the
// connection failed (the error is printed), 64 bad usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "runtime/world/communicator.h"
#include "tests/runtime/test_data.h"

namespace korovod::testing {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "korovod-test-rank: %s\nusage: korovod-test-rank --rank R --peers "
               "host:port,host:port,... [--transport tcp|shm|auto] [--check allreduce,allgather] "
               "[--job-key KEY] [--connect-timeout-ms MS] [--op-timeout-ms MS]\n",
               why.c_str());
  std::exit(64);
}

struct Outcome {
  int exit_code = 0;
  void Pass(const std::string& name, const void* data, size_t bytes) {
    std::printf("check %s ok digest %016llx\n", name.c_str(),
                static_cast<unsigned long long>(Digest(data, bytes)));
    std::fflush(stdout);
  }
  void Wrong(const std::string& name, const std::string& why) {
    std::printf("check %s FAILED: %s\n", name.c_str(), why.c_str());
    std::fflush(stdout);
    if (exit_code == 0) exit_code = 1;
  }
};

Status CheckAllreduce(Communicator& comm, size_t count, Outcome& out) {
  const std::string name = "allreduce_float32_sum_n" + std::to_string(count);
  const uint64_t seed = Mix(0xa11 + count);
  std::vector<float> buf(count);
  FillReduceInput(buf.data(), count, DataType::kFloat32, seed, ReduceOp::kSum, comm.rank(),
                  comm.size());
  AllreduceOptions o;
  o.input = o.output = buf.data();
  o.count = count;
  o.type = DataType::kFloat32;
  o.op = ReduceOp::kSum;
  KV_RETURN_IF_ERROR(Allreduce(comm, o).WithContext(name));
  const ReduceSpec spec{seed, ReduceOp::kSum, DataType::kFloat32, comm.size(), 1.0, 1.0};
  const std::string err = CheckReduction(spec, buf.data(), count);
  if (err.empty()) {
    out.Pass(name, buf.data(), count * sizeof(float));
  } else {
    out.Wrong(name, err);
  }
  return OkStatus();
}

Status CheckAllgather(Communicator& comm, size_t total, Outcome& out) {
  const std::string name = "allgather_float32_uneven_n" + std::to_string(total);
  const uint64_t seed = Mix(0xa99 + total);
  const std::vector<size_t> counts = SplitCounts(total, comm.size(), true);
  std::vector<float> in(counts[comm.rank()]), gathered(total);
  FillMoveValues(in.data(), in.size(), DataType::kFloat32, seed, comm.rank(), 0);
  AllgatherOptions o;
  o.input = in.data();
  o.output = gathered.data();
  o.counts = counts;
  o.type = DataType::kFloat32;
  KV_RETURN_IF_ERROR(Allgather(comm, o).WithContext(name));
  std::string err;
  size_t off = 0;
  for (int j = 0; j < comm.size(); ++j) {
    const std::string e =
        CheckMoveValues(gathered.data() + off, counts[j], DataType::kFloat32, seed, j, 0);
    if (!e.empty()) err += "block of rank " + std::to_string(j) + ": " + e + "; ";
    off += counts[j];
  }
  if (err.empty()) {
    out.Pass(name, gathered.data(), total * sizeof(float));
  } else {
    out.Wrong(name, err);
  }
  return OkStatus();
}

int Main(int argc, char** argv) {
  WorldOptions options;
  options.rank = -1;
  options.transport = TransportKind::kTcp;
  options.connect_timeout = std::chrono::milliseconds(30000);
  options.op_timeout = std::chrono::milliseconds(60000);
  std::vector<std::string> checks = {"allreduce", "allgather"};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Usage("missing value for " + flag);
    const std::string value = argv[++i];
    if (flag == "--rank") {
      options.rank = std::atoi(value.c_str());
    } else if (flag == "--peers") {
      for (const std::string& hp : Split(value, ',')) {
        const size_t colon = hp.rfind(':');
        if (colon == std::string::npos || colon == 0) Usage("bad peer '" + hp + "'");
        const int port = std::atoi(hp.c_str() + colon + 1);
        if (port <= 0 || port > 65535) Usage("bad port in '" + hp + "'");
        options.peers.push_back({hp.substr(0, colon), static_cast<uint16_t>(port)});
      }
    } else if (flag == "--transport") {
      if (value == "tcp") {
        options.transport = TransportKind::kTcp;
      } else if (value == "shm") {
        options.transport = TransportKind::kShm;
      } else if (value == "auto") {
        options.transport = TransportKind::kAuto;
      } else {
        Usage("unknown transport '" + value + "'");
      }
    } else if (flag == "--check") {
      checks = Split(value, ',');
    } else if (flag == "--job-key") {
      options.job_key = value;
    } else if (flag == "--connect-timeout-ms") {
      options.connect_timeout = std::chrono::milliseconds(std::atol(value.c_str()));
    } else if (flag == "--op-timeout-ms") {
      options.op_timeout = std::chrono::milliseconds(std::atol(value.c_str()));
    } else {
      Usage("unknown flag " + flag);
    }
  }
  if (options.peers.empty()) Usage("--peers is required");
  if (options.rank < 0 || options.rank >= static_cast<int>(options.peers.size())) {
    Usage("--rank must be in [0, number of peers)");
  }
  for (const std::string& c : checks) {
    if (c != "allreduce" && c != "allgather") Usage("unknown check '" + c + "'");
  }

  auto comm = Communicator::Create(options);
  if (!comm.ok()) {
    std::printf("rank %d: ERROR %s\n", options.rank, comm.status().ToString().c_str());
    return 2;
  }
  std::printf("rank %d: connected to %d ranks over %s\n", options.rank, comm.value()->size(),
              comm.value()->transport_name());
  std::fflush(stdout);
  Outcome outcome;
  Status status;
  for (const std::string& c : checks) {
    for (size_t n : {size_t{1}, size_t{1000003}}) {
      status = c == "allreduce" ? CheckAllreduce(*comm.value(), n, outcome)
                                : CheckAllgather(*comm.value(), n, outcome);
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
  }
  comm.value().reset();
  if (!status.ok()) {
    std::printf("rank %d: ERROR %s\n", options.rank, status.ToString().c_str());
    return 2;
  }
  return outcome.exit_code;
}

}  // namespace
}  // namespace korovod::testing

int main(int argc, char** argv) { return korovod::testing::Main(argc, argv); }
