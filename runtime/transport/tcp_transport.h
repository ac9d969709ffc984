// TcpTransport: several connections per peer pair; messages of at least stripe_min bytes are
// split into equal, page-aligned parts, one per connection, so both cores and several socket
// buffers work on one large message. Non-blocking sockets, no per-message allocation once warm.
// When the mesh has wire security (wire_security.h), every part is sent as sealed records
// (tcp_sealed.cc); with none, the bytes go as they are, and the one check is per message.
#pragma once

#include <poll.h>

#include <memory>
#include <vector>

#include "common/wait_policy.h"
#include "runtime/transport/peer_mesh.h"
#include "runtime/transport/transport.h"

namespace korovod {

class TcpTransport : public Transport {
 public:
  // Uses the mesh's data streams [first_stream, first_stream + streams) to every peer (streams
  // 0: all of them). Transports on disjoint ranges of one mesh run concurrently (collective
  // lanes); each is used by one thread at a time.
  TcpTransport(std::shared_ptr<PeerMesh> mesh, size_t stripe_min, WaitPolicy wait,
               int first_stream = 0, int streams = 0);

  Status Exchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline) override;
  void Abort(const Status& why) override { mesh_->Abort(why); }
  const char* Name() const override { return "tcp"; }

 private:
  struct Part {
    int fd;
    size_t begin;
    size_t end;
    size_t done = 0;      // bytes moved
    size_t consumed = 0;  // bytes handed to the consumer (receive side)
    int stream = 0;       // the mesh's stream index (wire security: its keys, its name)
  };
  // Wire security: the record a part is moving (tcp_sealed.cc). Part::done counts the payload of
  // the records complete (received ones verified).
  struct RecordProgress {
    size_t begin = 0;  // offset of the record in its part
    size_t len = 0;    // payload bytes; 0: the next record has not been started
    size_t moved = 0;  // bytes of payload and tag sent or received
    unsigned char tag[16] = {};
  };
  void PlanParts(int peer, size_t len, std::vector<Part>* parts) const;
  Status Fail(Status s);
  // One non-blocking pass over the parts of a message: sends (receives, handing whole granules
  // to the consumer) what the sockets take; `progressed` when any byte moved.
  Status SendPass(const SendSpec& send, size_t& send_left, bool& progressed);
  Status ReceivePass(const RecvSpec& recv, size_t window_bytes, size_t& recv_left,
                     bool& progressed);
  // Blocks until a socket with work is ready, a watched peer speaks or hangs up, or a poll slice
  // (bounded by `deadline`) ends. A peer's abort or death is the error.
  Status WaitForSockets(Deadline deadline);
  Status TimedOut(const SendSpec& send, const RecvSpec& recv, size_t send_left,
                  size_t recv_left);
  // The same exchange over sealed records (tcp_sealed.cc).
  Status SealedExchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline);
  Status SealedSendPass(const SendSpec& send, size_t& send_left, bool& progressed);
  Status SealedReceivePass(const RecvSpec& recv, size_t& recv_left, bool& progressed);
  Status SealedReceiveRecord(const RecvSpec& recv, size_t i, std::byte* payload);

  std::shared_ptr<PeerMesh> mesh_;
  size_t stripe_min_;
  int first_stream_;
  int streams_;

 public:
  void SetStripeMin(size_t bytes) override { stripe_min_ = bytes; }

 private:
  WaitPolicy wait_;
  std::vector<std::byte> staging_;  // one receive window per stream, grow-only
  std::vector<Part> send_parts_, recv_parts_;
  std::vector<pollfd> pollfds_;   // reused across waits: no allocation per message
  std::vector<int> pollfd_peer_;  // peer owning each control entry, -1 for data entries
  Status broken_;
  const bool sealed_;   // wire security other than none
  const bool encrypt_;  // records are encrypted (else authenticated only)
  std::vector<RecordProgress> send_records_, recv_records_;  // one per part
  std::vector<std::byte> seal_staging_;  // encrypt: one record of ciphertext per send part
};

}  // namespace korovod
