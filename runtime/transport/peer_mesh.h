// PeerMesh: the authenticated TCP connections between this rank and every peer, made once per
// communicator. Transports run over it (TCP) or bootstrap through it (shared memory), and it
// notices when a peer process dies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/common/deadline.h"
#include "runtime/common/status.h"
#include "runtime/transport/socket.h"
#include "runtime/world/world.h"

namespace korovod {

class PeerMesh {
 public:
  // Opens `streams` connections to every peer: rank r dials every lower rank and accepts from
  // every higher one. Each connection runs a mutual HMAC-SHA256 challenge on the job key before
  // it is used. Fails within options.connect_timeout with an error naming the peer.
  static StatusOr<std::unique_ptr<PeerMesh>> Connect(const WorldOptions& options, int streams);

  // Tells every peer this rank is leaving on purpose, then closes.
  ~PeerMesh();
  PeerMesh(int rank, std::vector<PeerAddress> peers, int streams);  // use Connect
  PeerMesh(const PeerMesh&) = delete;
  PeerMesh& operator=(const PeerMesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(peers_.size()); }
  int streams() const { return streams_; }
  int fd(int peer, int stream) const { return conns_[peer][stream].get(); }
  std::string Describe(int peer) const;  // "rank 2 (10.0.0.2:5000)"

  // Control connection (stream 0) of each peer still watched for hang-up; -1 for self and for
  // peers that left cleanly.
  int watch_fd(int peer) const { return watched_[peer] ? conns_[peer][0].get() : -1; }
  // Called when poll reports hang-up on a watched fd: distinguishes a clean departure (goodbye
  // message) from death, which becomes an error naming the peer.
  Status OnWatchedHangup(int peer);
  // Polls every watched connection without blocking.
  Status CheckPeersAlive();

 private:
  int rank_;
  std::vector<PeerAddress> peers_;
  int streams_;
  std::vector<std::vector<Fd>> conns_;  // [peer][stream]
  std::vector<bool> watched_;
};

}  // namespace korovod
