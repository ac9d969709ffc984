// Elastic rendezvous: membership of an elastic job across epochs.
//
// One server per job (korovodrun hosts it) knows which workers are alive: the driver, which starts
// and reaps them, says so (SetLiveWorkers). A worker's sidecar registers for the next epoch each
// time its trainer initializes (JoinElasticEpoch), with its stable worker id, the epoch it last
// belonged to, and its RankEntry. The server forms epoch e+1 once every live worker has registered
// and at least min_workers are alive. Ranks go first to the members of epoch e in their old order
// (rank 0 stays rank 0 when it survives), then to newcomers in the order they registered; every
// registrant receives the same table with its epoch, rank and size.
//
// Every wait is bounded by `timeout` (korovodrun's --elastic-timeout):
//   - fewer than min_workers alive for that long fails every waiting worker and the server
//     (failure()) with a message naming how many workers there were and how many were needed;
//   - a live worker that has not registered that long after the first registration of the epoch
//     is left out (TakeLost(): the driver stops it) and the epoch forms without it if enough
//     remain.
// Refused, with the reason: a worker the driver no longer lists, a worker registering from an
// epoch older than the one that formed with it (stale) or from a newer one, a formation beyond
// reset_limit resets.
//
// Membership version: bumped whenever SetLiveWorkers adds or removes a worker, with Horovod's
// HostUpdateResult bits. Members ask (QueryMembership) at a commit whether it moved since their
// epoch formed: that is hvd.elastic's HostsUpdatedInterrupt.
//
// Connections are authenticated with the job key (runtime/transport/handshake.h) and carry
// rendezvous frames (rendezvous_frame.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/status.h"
#include "runtime/transport/handshake_listener.h"
#include "runtime/transport/transport_options.h"
#include "runtime/world/world.h"

namespace korovod {

// Horovod's HostUpdateResult: what changed in the membership (bits, OR-ed over several changes).
enum HostUpdate : int { kNoHostUpdate = 0, kHostsRemoved = 1, kHostsAdded = 2 };

struct ElasticServerOptions {
  std::string job_key;
  int min_workers = 1;
  int max_workers = 0;   // > 0: an epoch holds at most this many (the oldest first)
  int reset_limit = -1;  // >= 0: at most this many formations after the first
  std::chrono::milliseconds timeout{600000};
  int listen_fd = -1;  // an already listening socket; -1: bind 0.0.0.0:port
  uint16_t port = 0;   // 0: any free port
  // A driver that took over a running job (a new operator leader) resumes where the last server
  // stopped: epoch `resume_epoch` (0: a new job) formed with `resume_members` by rank after
  // `resume_resets` resets, at membership version `resume_version`. Its members keep their ranks
  // and may register from that epoch; they count as live until the driver says otherwise, so the
  // first SetLiveWorkers bumps the version past the one they formed at exactly when the membership
  // moved meanwhile.
  uint32_t resume_epoch = 0;
  std::vector<std::string> resume_members;
  int resume_resets = 0;
  uint64_t resume_version = 0;
};

class ElasticRendezvousServer {
 public:
  static StatusOr<std::unique_ptr<ElasticRendezvousServer>> Start(ElasticServerOptions options);
  ~ElasticRendezvousServer();  // stops serving; waiting workers see the connection close
  ElasticRendezvousServer(const ElasticRendezvousServer&) = delete;
  ElasticRendezvousServer& operator=(const ElasticRendezvousServer&) = delete;

  uint16_t port() const { return port_; }

  // The driver: the workers alive now. Adding or removing any bumps the membership version.
  void SetLiveWorkers(const std::vector<std::string>& workers);

  uint32_t epoch() const;                    // the last epoch formed (0: none yet)
  uint64_t formed_version() const;           // the membership version it formed at
  std::vector<std::string> members() const;  // its workers, by rank
  int resets() const;                        // formations after the first
  Status failure() const;                    // set once the job cannot go on
  std::vector<std::string> TakeLost();       // live workers given up on since the last call

  struct Waiting;  // a registered worker awaiting its epoch (elastic_rendezvous.cc)

 private:
  explicit ElasticRendezvousServer(ElasticServerOptions options, Fd listener, uint16_t port);
  void Run();
  void Accept(AuthenticatedConnection c);
  void TryForm();  // with mu_ held
  void Form(const std::vector<std::string>& order);
  void FailAll(const Status& s);  // with mu_ held

  ElasticServerOptions options_;
  Fd listener_;
  // Handshakes run concurrently here: a stalled or lying client never holds up the server.
  std::unique_ptr<HandshakeListener> handshakes_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;
  std::set<std::string> live_;
  std::map<std::string, std::unique_ptr<Waiting>> waiting_;
  uint64_t registrations_ = 0;  // orders newcomers
  uint32_t epoch_ = 0;
  std::vector<std::string> members_;
  int formations_ = 0;
  uint64_t version_ = 0;
  uint64_t formed_version_ = 0;
  std::vector<std::pair<uint64_t, int>> updates_;  // (version, HostUpdate bits)
  std::optional<Clock::time_point> below_min_since_;
  std::optional<Clock::time_point> first_registered_;
  Status failure_;
  std::vector<std::string> lost_;
  std::thread thread_;
};

struct ElasticJoinOptions {
  PeerAddress server;
  std::string job_key;
  std::string worker;       // stable id across epochs (korovodrun: "host/slot")
  uint32_t last_epoch = 0;  // the epoch this worker last belonged to; 0: none
  RankEntry self;           // host, node, data port, candidate addresses
  std::chrono::milliseconds timeout{600000};
};

struct ElasticAssignment {
  uint32_t epoch = 0;
  int rank = 0;
  int size = 0;
  uint64_t version = 0;  // the membership version the epoch formed at
  std::vector<RankEntry> table;
};

// Registers and waits for the next epoch (reconnecting with backoff if the server is not up yet or
// the connection drops). A refusal is FailedPrecondition with the server's reason; no answer by
// the timeout is DeadlineExceeded naming the server.
StatusOr<ElasticAssignment> JoinElasticEpoch(const ElasticJoinOptions& options);

struct MembershipVersion {
  uint64_t version = 0;  // now
  uint32_t epoch = 0;    // the last epoch formed
  int update = 0;        // HostUpdate bits of the changes after the version asked about
  // Members of that epoch the driver no longer lists (their pod or node is gone): the epoch cannot
  // go on, even where no connection to them has broken (a frozen or partitioned worker).
  std::vector<std::string> gone;
};

// Asks the server whether the membership moved since `since` (an ElasticAssignment::version).
StatusOr<MembershipVersion> QueryMembership(const PeerAddress& server, const std::string& job_key,
                                            uint64_t since, Deadline deadline);

// The frames' texts, parsed apart from the sockets (the server's and the workers' only decoders
// of another process's bytes; tests/fuzz drives them with arbitrary bytes).
//
// A registration: "worker=ID epoch=N" and the worker's rank line. The error is the refusal text.
struct ElasticRegistration {
  std::string worker;
  uint64_t last_epoch = 0;  // <= UINT32_MAX
  RankEntry entry;
};
StatusOr<ElasticRegistration> ParseElasticRegistration(std::string_view text);
// A query "since=V": V, or 0 when absent or not a number.
uint64_t ParseMembershipQuery(std::string_view text);
// The server's table frame: "epoch=E rank=R size=N version=V" and the world table. `me` and
// `server` name the two ends in the error.
inline constexpr uint64_t kMaxElasticWorldSize = 1 << 20;  // the world table's rank bound
StatusOr<ElasticAssignment> ParseElasticAssignment(std::string_view text, const std::string& me,
                                                   const std::string& server);
// The server's version frame: "version=V epoch=E update=U" and the gone members, one per line.
StatusOr<MembershipVersion> ParseMembershipVersion(std::string_view text, const std::string& who);

}  // namespace korovod
