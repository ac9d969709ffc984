// Runs a world of N ranks inside one test on loopback.
//
// Thread variant (RunThreadRanks): N threads in this process. N TCP sockets are bound to
// 127.0.0.1 port 0 and listening before any rank starts, so there is no port race; each thread
// calls Communicator::Create with its socket (WorldOptions::listen_fd) and then runs the per-rank
// body. Bodies do not stop at a failed check: they record it (RankContext::Fail) and carry on, so
// the other ranks are not left waiting in a collective; ExpectAllRanksOk turns every rank's
// failures into test failures that name the rank.
//
// Process variant (ProcessWorld): N children forked before the test creates any thread; each runs
// one rank and reports over a pipe, so a test can SIGKILL a rank in the middle of a collective.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/world/communicator.h"
#include "runtime/world/world.h"

namespace korovod::testing {

const char* TransportName(TransportKind t);

struct WorldSpec {
  int size = 2;
  TransportKind transport = TransportKind::kTcp;
  std::chrono::milliseconds connect_timeout{20000};
  std::chrono::milliseconds op_timeout{60000};
  std::string job_key = "korovod-test-job-key";
  // Ranks that are given an address but never started. Their port is reserved and closed (a
  // connection is refused) unless absent_rank_listens, then it listens but never accepts.
  std::vector<int> absent_ranks;
  bool absent_rank_listens = false;
  // Rank r listens on 127.0.0.(r+1) instead of 127.0.0.1 (one machine, a host string per rank, as
  // korovod-bench gives its TCP sidecars).
  bool distinct_loopback_hosts = false;
  // Last word on each rank's options before Communicator::Create (per-rank job key, tuning...).
  std::function<void(WorldOptions&)> customize;
};

// What one rank's body sees.
class RankContext {
 public:
  RankContext(int rank, Communicator* comm) : rank_(rank), comm_(comm) {}

  int rank() const { return rank_; }
  Communicator& comm() { return *comm_; }
  int size() const { return comm_->size(); }

  // Records a failed check and carries on.
  void Fail(const std::string& what) { failures_.push_back(what); }
  bool Check(bool ok, const std::string& what) {
    if (!ok) Fail(what);
    return ok;
  }
  // Records this rank's digest of a result every listed rank must hold bit for bit.
  void RecordDigest(const std::string& key, uint64_t digest) { digests_[key] = digest; }

  const std::vector<std::string>& failures() const { return failures_; }
  const std::map<std::string, uint64_t>& digests() const { return digests_; }

 private:
  int rank_;
  Communicator* comm_;
  std::vector<std::string> failures_;
  std::map<std::string, uint64_t> digests_;
};

using RankBody = std::function<Status(RankContext&)>;

struct RankReport {
  int rank = -1;
  bool started = false;  // false for absent ranks
  bool created = false;  // Communicator::Create succeeded
  Status status;         // Create's error, else the body's result
  std::vector<std::string> failures;
  std::map<std::string, uint64_t> digests;
  std::chrono::steady_clock::duration elapsed{};  // from start to the body's return
};

struct ThreadWorld {
  std::vector<PeerAddress> peers;
  std::vector<RankReport> reports;  // indexed by rank
};

// Runs `body` on every started rank of `spec` in its own thread and joins them. The body runs
// only on ranks whose Create succeeded; the Communicator is destroyed on the rank's own thread
// after the body returns.
ThreadWorld RunThreadRanks(const WorldSpec& spec, const RankBody& body);

// Adds a test failure for every started rank whose Create or body failed or that recorded failed
// checks, and for every digest key whose ranks do not all agree; each names the rank.
void ExpectAllRanksOk(const ThreadWorld& world);

// Binds a TCP socket to 127.0.0.1:0 and listens; returns the fd and sets *port. Aborts the test
// binary on failure (loopback must work).
int ListenLoopback(uint16_t* port, uint32_t ip = 0x7f000001u);  // ip: host order, 127.0.0.1
// A loopback port nobody listens on (bound, then closed).
uint16_t UnusedLoopbackPort();

// Number of threads of this process (from /proc/self/task).
int ThreadCount();

// ---- Process variant ----

struct ProcessReport {
  bool reported = false;
  Status status;
  Clock::time_point at{};  // when the child reported (steady clock: same on both sides)
};

// Body of a forked rank. `ready()` tells the parent this rank is running (call it once).
using ProcessBody = std::function<Status(Communicator& comm, const std::function<void()>& ready)>;

class ProcessWorld {
 public:
  // Forks spec.size children; child r creates its communicator, runs body, reports its Status,
  // destroys the communicator and exits 0 (3 if the report could not be written). The calling
  // process must have exactly one thread (fork duplicates only the caller); returns an error
  // otherwise. Absent ranks are not started.
  static StatusOr<std::unique_ptr<ProcessWorld>> Start(const WorldSpec& spec,
                                                       const ProcessBody& body);
  ~ProcessWorld();  // SIGKILLs and reaps children still running

  const std::vector<PeerAddress>& peers() const { return peers_; }
  pid_t pid(int rank) const { return children_[rank].pid; }

  // Waits until every started rank has called ready() or reported; false on deadline.
  bool WaitReady(Deadline deadline);
  // SIGKILLs one rank now.
  void Kill(int rank);
  // Waits for rank's final report (its body's Status); nullopt if none came by the deadline or
  // the child died without one.
  std::optional<ProcessReport> WaitReport(int rank, Deadline deadline);
  // Waits for the child to exit. Returns a description: "exit 0", "exit 3", "signal 9 (Killed)";
  // on deadline kills it and returns "still running at the deadline".
  std::string WaitExit(int rank, Deadline deadline);

 private:
  struct Child {
    pid_t pid = -1;
    int pipe_fd = -1;
    bool ready = false;
    bool eof = false;
    std::string buffer;  // bytes read so far
    std::optional<ProcessReport> report;
    bool reaped = false;
    int wait_status = 0;
  };
  ProcessWorld() = default;
  // Reads whatever is available from the pipes, waiting up to the deadline for something.
  void Pump(Deadline deadline);
  void Parse(Child& c);

  std::vector<PeerAddress> peers_;
  std::vector<Child> children_;
};

}  // namespace korovod::testing

namespace korovod {
// Lets GoogleTest print a TransportKind test parameter as "tcp"/"shm" (found by ADL).
inline void PrintTo(TransportKind t, std::ostream* os) { *os << testing::TransportName(t); }
}  // namespace korovod
