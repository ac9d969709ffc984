// Elastic rendezvous: membership of an elastic job across epochs.
//
// One server per job knows which workers are alive: the driver (korovodrun, or the operator's
// leader), which starts and reaps them, says so (SetLiveWorkers). A worker's sidecar registers for
// the next epoch each time its trainer initializes (JoinElasticEpoch), with its stable worker id,
// the epoch it last belonged to, and its RankEntry. The server forms epoch e+1 once every live
// worker has registered and at least min_workers are alive. Ranks go first to the members of
// epoch e in their old order (rank 0 stays rank 0 when it survives), then to newcomers in the
// order they registered; every registrant receives the same table with its epoch, rank and size.
//
// Every wait is bounded by `timeout` (korovodrun's --elastic-timeout, spec.elastic.timeoutSeconds):
//   - fewer than min_workers alive for that long fails every waiting worker and the server
//     (failure()) with a message naming how many workers there were and how many were needed;
//   - a live worker that has not registered that long after the first registration of the epoch
//     is left out (TakeLost(): the driver stops it) and the epoch forms without it if enough
//     remain;
//   - a worker the driver does not list yet (its pod started before the operator saw it Running)
//     is held, registered, until the driver lists it, and refused naming it and the timeout if
//     that does not happen within it.
// Refused at once, with the reason: a worker the driver listed and then removed, a worker
// registering from an epoch older than the one that formed with it (stale) or from a newer one, a
// formation beyond reset_limit resets.
//
// Membership version: bumped whenever SetLiveWorkers adds or removes a worker, with Horovod's
// HostUpdateResult bits. Members ask (QueryMembership) at a commit whether it moved since their
// epoch formed: that is hvd.elastic's HostsUpdatedInterrupt. A query may wait (a long poll) until
// the version moves past the last one the member saw, so a watch costs one held connection, not a
// round trip a second. The update log keeps the changes since the current epoch formed and at
// most kMaxUpdateLog entries: older changes are merged into one, so a member of an older epoch
// reads every bit that may have changed (it resets either way), never fewer.
//
// Fencing: a server carries the fencing token of the driver that runs it (the operator leader's
// Lease transitions; a new leader has a higher one) in every answer. A worker keeps the highest
// token it met and sends it; a server with a lower one is a deposed leader's: it answers "fenced"
// (and the worker checks every answer's token itself), and the worker tries the other addresses
// the server's name resolves to.
//
// Connections are authenticated with the job key (runtime/transport/handshake.h) and carry
// rendezvous frames (rendezvous_frame.h). The server serves on a MembershipListener
// (membership_listener.h): its own, or one shared by every job of the driver, where a connection
// names its job (ElasticJobId) before the handshake.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
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

class MembershipListener;

// The id a connection names its job by on a shared listener: derived from the job key (the first
// 16 bytes of HMAC-SHA256(key, a fixed label), in hex), so neither side needs another setting and
// it tells nothing about the key.
std::string ElasticJobId(const std::string& job_key);

// Horovod's HostUpdateResult: what changed in the membership (bits, OR-ed over several changes).
enum HostUpdate : int { kNoHostUpdate = 0, kHostsRemoved = 1, kHostsAdded = 2 };

struct ElasticServerOptions {
  std::string job_key;
  int min_workers = 1;
  int max_workers = 0;   // > 0: an epoch holds at most this many (the oldest first)
  int reset_limit = -1;  // >= 0: at most this many formations after the first
  std::chrono::milliseconds timeout{600000};
  // Where it serves: a listener shared with other jobs (the operator's), or, when unset, one of
  // its own on `listen_fd` (an already listening socket) or, if that is -1, 0.0.0.0:port (0: any).
  std::shared_ptr<MembershipListener> listener;
  int listen_fd = -1;
  uint16_t port = 0;
  // The driver's fencing token (the operator leader's Lease transitions; korovodrun: 0), in every
  // answer: workers that met a higher one refuse this server.
  uint64_t fencing_token = 0;
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

inline constexpr size_t kMaxUpdateLog = 256;

class ElasticRendezvousServer {
 public:
  static StatusOr<std::unique_ptr<ElasticRendezvousServer>> Start(ElasticServerOptions options);
  // Stops serving at once: waiting workers and held queries see their connection close.
  ~ElasticRendezvousServer();
  ElasticRendezvousServer(const ElasticRendezvousServer&) = delete;
  ElasticRendezvousServer& operator=(const ElasticRendezvousServer&) = delete;

  uint16_t port() const;
  uint64_t fencing_token() const { return options_.fencing_token; }

  // The driver: the workers alive now. Adding or removing any bumps the membership version.
  void SetLiveWorkers(const std::vector<std::string>& workers);

  uint32_t epoch() const;                    // the last epoch formed (0: none yet)
  uint64_t formed_version() const;           // the membership version it formed at
  std::vector<std::string> members() const;  // its workers, by rank
  int resets() const;                        // formations after the first
  Status failure() const;                    // set once the job cannot go on
  std::vector<std::string> TakeLost();       // live workers given up on since the last call
  size_t update_log_size() const;            // entries kept (bounded by kMaxUpdateLog)

  struct Waiting;  // a registered worker awaiting its epoch (elastic_rendezvous.cc)
  struct Watcher;  // a membership query waiting for the version to move

 private:
  friend class MembershipListener;  // drives it: connections, hang-ups, timers
  ElasticRendezvousServer(ElasticServerOptions options, std::shared_ptr<MembershipListener> l);
  // Called on the listener's thread.
  void Accept(AuthenticatedConnection c);
  void AppendFds(std::vector<pollfd>& fds);
  void Service(const std::map<int, short>& revents);
  void AnswerQuery(int fd, uint64_t since, const std::string& who);    // with mu_ held
  std::string VersionAnswer(uint64_t since) const;                     // with mu_ held
  void Fence(int fd, uint64_t fence, const std::string& who);          // with mu_ held
  void Register(AuthenticatedConnection& c, const std::string& text);  // with mu_ held
  void HoldUnlisted();                                                 // with mu_ held
  void AnswerWatchers(bool all);                                       // with mu_ held
  void AddUpdate(int bits);                                            // with mu_ held
  void TryForm();                                                      // with mu_ held
  void Form(const std::vector<std::string>& order);
  void FailAll(const Status& s);  // with mu_ held

  const ElasticServerOptions options_;
  const std::string job_id_;
  std::shared_ptr<MembershipListener> listener_;

  mutable std::mutex mu_;
  std::set<std::string> live_;
  std::set<std::string> removed_;  // listed once, then not: refused at once (bounded)
  std::map<std::string, std::unique_ptr<Waiting>> waiting_;
  std::vector<std::unique_ptr<Watcher>> watchers_;
  uint64_t registrations_ = 0;  // orders newcomers
  uint32_t epoch_ = 0;
  std::vector<std::string> members_;
  int formations_ = 0;
  uint64_t version_ = 0;
  uint64_t formed_version_ = 0;
  std::vector<std::pair<uint64_t, int>> updates_;  // (version, HostUpdate bits), ascending
  std::optional<Clock::time_point> below_min_since_;
  std::optional<Clock::time_point> first_registered_;
  Status failure_;
  std::vector<std::string> lost_;
  bool told_deposed_ = false;
};

struct ElasticJoinOptions {
  PeerAddress server;
  std::string job_key;
  std::string worker;       // stable id across epochs (korovodrun: "host/slot")
  uint32_t last_epoch = 0;  // the epoch this worker last belonged to; 0: none
  RankEntry self;           // host, node, data port, candidate addresses
  std::chrono::milliseconds timeout{600000};
  uint64_t min_token = 0;  // the highest fencing token this worker met: lower servers are refused
};

struct ElasticAssignment {
  uint32_t epoch = 0;
  int rank = 0;
  int size = 0;
  uint64_t version = 0;  // the membership version the epoch formed at
  uint64_t token = 0;    // the server's fencing token
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
  uint64_t token = 0;  // the server's fencing token
};

struct MembershipQuery {
  uint64_t since = 0;  // an ElasticAssignment::version: the changes after it are reported
  // A long poll: the server answers once the version is past `seen` (the last one this member
  // read) or `wait` passed; 0 answers at once.
  uint64_t seen = 0;
  std::chrono::milliseconds wait{0};
  uint64_t min_token = 0;  // as ElasticJoinOptions::min_token
  std::stop_token stop;    // a stop request ends a held query at once (Aborted)
};

// Asks the server whether the membership moved since `since` (an ElasticAssignment::version).
StatusOr<MembershipVersion> QueryMembership(const PeerAddress& server, const std::string& job_key,
                                            uint64_t since, Deadline deadline);
StatusOr<MembershipVersion> QueryMembership(const PeerAddress& server, const std::string& job_key,
                                            const MembershipQuery& query, Deadline deadline);

// The frames' texts, parsed apart from the sockets (the server's and the workers' only decoders
// of another process's bytes; tests/fuzz drives them with arbitrary bytes).
//
// A registration: "worker=ID epoch=N" and the worker's rank line. The error is the refusal text.
struct ElasticRegistration {
  std::string worker;
  uint64_t last_epoch = 0;  // <= UINT32_MAX
  uint64_t fence = 0;       // the highest fencing token the worker met ("fence=T", optional)
  RankEntry entry;
};
StatusOr<ElasticRegistration> ParseElasticRegistration(std::string_view text);
// A query "since=V [seen=K wait=MS fence=T]": each 0 when absent or not a number.
struct ParsedMembershipQuery {
  uint64_t since = 0;
  uint64_t seen = 0;
  uint64_t wait_ms = 0;
  uint64_t fence = 0;
};
ParsedMembershipQuery ParseMembershipQueryFields(std::string_view text);
uint64_t ParseMembershipQuery(std::string_view text);  // its `since`
// The server's table frame: "epoch=E rank=R size=N version=V [token=T]" and the world table. `me`
// and `server` name the two ends in the error.
inline constexpr uint64_t kMaxElasticWorldSize = 1 << 20;  // the world table's rank bound
StatusOr<ElasticAssignment> ParseElasticAssignment(std::string_view text, const std::string& me,
                                                   const std::string& server);
// The server's version frame: "version=V epoch=E update=U [token=T]" and the gone members, one
// per line.
StatusOr<MembershipVersion> ParseMembershipVersion(std::string_view text, const std::string& who);

}  // namespace korovod
