// PeerMesh: the authenticated TCP connections between this rank and every peer, made once per
// communicator. Transports run over it (TCP) or bootstrap through it (shared memory), and it
// notices when a peer process dies.
#pragma once

#include <poll.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/socket.h"
#include "runtime/transport/transport_options.h"
#include "runtime/transport/wire_security.h"

namespace korovod {

class PeerMesh {
 public:
  // Chooses the addresses to dial: may replace peers[p] for the lower ranks p. Runs once, after
  // this rank started answering connections and probes and before it dials anyone.
  using DialPlanner = std::function<Status(std::vector<PeerAddress>& peers, Deadline deadline)>;

  // Opens `streams` data connections and one control connection to every peer: rank r dials
  // every lower rank and accepts from every higher one. Each connection runs a mutual HMAC-SHA256
  // challenge on the job key before it is used (runtime/transport/handshake.h). Fails within
  // options.connect_timeout with an error naming the peer; a peer holding another key is a
  // PermissionDenied naming it. `plan`, if set, picks the dial addresses first (preflight).
  static StatusOr<std::unique_ptr<PeerMesh>> Connect(const TransportOptions& options, int streams,
                                                     const DialPlanner& plan = nullptr);

  // A preflight probe: connects to `addr` (retrying refusals until connect_deadline) and runs the
  // handshake as rank `from` reaching rank `to` without becoming a mesh connection; the listener
  // there (this class's acceptor) answers and both sides close. OK proves the address reaches a
  // rank holding the job key; PermissionDenied means the keys (or the epochs) differ.
  static Status Probe(const PeerAddress& addr, const std::string& job_key, uint32_t epoch, int from,
                      int to, int world, Deadline connect_deadline, Deadline deadline);

  // Tells every peer this rank is leaving on purpose (unless it aborted), then closes.
  ~PeerMesh();
  PeerMesh(int rank, std::vector<PeerAddress> peers, int streams);  // use Connect
  PeerMesh(const PeerMesh&) = delete;
  PeerMesh& operator=(const PeerMesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  int streams() const { return streams_; }
  int fd(int peer, int stream) const { return conns_[peer][stream].get(); }
  std::string Describe(int peer) const;  // "rank 2 (10.0.0.2:5000)"
  // The address `p` is named by: as dialed for the lower ranks.
  const PeerAddress& peer(int p) const { return peers_[p]; }
  // Renames `peer` in messages (the address a higher rank actually came from). Before use only.
  void SetPeerAddress(int p, PeerAddress a) { peers_[p] = std::move(a); }
  // KOROVOD_WIRE_SECURITY, agreed by every peer in Connect.
  WireSecurity wire_security() const { return wire_security_; }
  // The record keys of data connection `stream` to `peer` (wire_security.h); null when
  // wire_security() is kNone. One transport uses a stream at a time, so they need no lock.
  ConnectionKeys* keys(int peer, int stream) {
    return keys_.empty() ? nullptr : &keys_[peer][stream];
  }

  // The IPs at this end and at the peer's end of the connection to `peer` ("" for self).
  std::string LocalIp(int peer) const;
  std::string RemoteIp(int peer) const;

  // The control connection carries only small framed messages (goodbye, abort with its reason,
  // ping and pong), never tensor bytes, so a peer's last word can always be read. With a job key
  // every frame carries a GCM tag under the connection's control keys (encrypted too in encrypt
  // mode), so nobody on the path can inject an abort, a goodbye or a pong. -1 for self and for
  // peers that have left or whose last word was read.
  int watch_fd(int peer) const {
    return watched_[peer].load(std::memory_order_acquire) ? conns_[peer][streams_].get() : -1;
  }
  // Called when a watched fd is readable or hung up: a goodbye is fine; an abort becomes an error
  // carrying the peer's reason; a hang-up without either means the peer died.
  // Several transports may share the mesh (collective lanes, one thread each): control events are
  // read under a lock, and the first failure any of them reads, or this rank's own Abort, is kept
  // so that the others stop with the same cause (failure()) instead of waiting out a deadline.
  Status OnControlEvent(int peer);
  // The first peer failure read from a control connection, or this rank's abort; OK otherwise.
  Status failure() const;
  // Polls every watched connection without blocking.
  Status CheckPeersAlive();
  // A data connection to `peer` failed with `error`: waits briefly for the peer's last word (or
  // another peer's death) so the error names the root cause, not a neighbour that gave up.
  Status ExplainFailure(int peer, Status error);
  // An op's deadline passed while this rank waited for `waited_for` (timed out `error`). A peer
  // waited for may itself be waiting for another, whose own deadline passes at about the same
  // moment: each is pinged on its control connection (any transport of a live rank answers, a
  // stopped, hung or cut-off one does not). One that does not answer within kPingWait is the
  // cause (`error`, saying so); if all answer, a peer's abort naming the cause is awaited for
  // up to kRelayWait. Returns the abort, or `error` with what the pings showed.
  Status ExplainTimeout(const std::vector<int>& waited_for, Status error);
  static constexpr std::chrono::milliseconds kPingWait{500};
  static constexpr std::chrono::milliseconds kRelayWait{1500};
  // Pongs received from `peer` so far (tests).
  uint64_t pongs(int peer) const { return pongs_[peer].load(std::memory_order_acquire); }
  // This rank gives up: every peer is told why, so its errors name the real cause.
  void Abort(const Status& why);

 private:
  friend struct PeerMeshFuzzAccess;  // tests/fuzz: feeds a control connection any bytes
  class Acceptor;                    // the accepting half of Connect (peer_mesh.cc)
  Status ReadControl(int peer);  // OnControlEvent's read, control_mu_ held
  // The control connections still watched, as a poll set, and the peer of each entry.
  void WatchedControlFds(std::vector<pollfd>& fds, std::vector<int>& who) const;
  // Reads every watched control connection until `until` or `done()`: answers pings, counts
  // pongs; the first peer failure (or this mesh's recorded one) ends it.
  Status PollControl(Deadline until, const std::function<bool()>& done);
  Status PartialControl(int fd, int peer);  // ReadControl found part of a message
  struct Dialed {
    std::vector<PeerAddress> addresses;  // as planned: the lower ranks' chosen addresses
    Status status;                       // the first failure to reach or handshake with a peer
    Status auth_status;                  // the first peer with another job key
  };
  // The dialing half of Connect: plans the addresses, then opens `links` connections to every
  // lower rank. Runs while the acceptor answers higher ranks.
  Dialed DialLowerRanks(const TransportOptions& options, int links, const DialPlanner& plan,
                        Deadline deadline);
  // After every connection is made: the record keys from the handshakes' secrets, then every
  // peer's KOROVOD_WIRE_SECURITY over the control connections (a frame authenticated whatever
  // the mode); a peer with another mode is an error naming both.
  Status SetUpWireSecurity(const TransportOptions& options, Deadline deadline);
  Status AgreeOnWireSecurity(Deadline deadline);
  void SendControl(int peer, uint32_t type, const std::string& reason);

  struct ControlKeys {
    ConnectionKeys keys;
    bool keyed = false;    // the job has a key: frames carry tags
    bool encrypt = false;  // frames after the agreement are encrypted
  };

  int rank_;
  std::vector<PeerAddress> peers_;
  int streams_;
  std::vector<std::vector<Fd>> conns_;  // [peer][stream]; [peer][streams_] is control
  // Handshake secrets, [peer][stream] like conns_: dropped once the keys are made.
  std::vector<std::vector<ConnectionSecret>> secrets_;
  WireSecurity wire_security_ = WireSecurity::kNone;
  std::vector<std::vector<ConnectionKeys>> keys_;  // [peer][data stream]; empty for kNone
  std::unique_ptr<ControlKeys[]> control_keys_;    // [peer]; used under control_mu_
  std::unique_ptr<std::atomic<bool>[]> watched_;
  std::unique_ptr<std::atomic<uint64_t>[]> pongs_;  // per peer: ExplainTimeout's answers
  mutable std::mutex control_mu_;  // guards control reads, aborted_ and failure_
  bool aborted_ = false;
  Status failure_;
};

}  // namespace korovod
