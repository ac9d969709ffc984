// TcpTransport over wire security (wire_security.h): each part of a message travels as records
// of RecordKey::kRecordBytes payload plus a 16-byte tag, cut the same way on both ends, so no
// header is sent. Sending: integrity sends the payload from the caller's buffer and the tag after
// it (one sendmsg); encrypt seals a record into a per-part buffer first. Receiving: a stored
// message (RecvSpec::dest) lands in place and is verified (decrypted) there; a consumed one in the
// part's window, handed on only once its tag checked. A failed tag fails the op naming the peer
// and the connection, and the peers are told at once (PeerMesh::Abort).
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "runtime/transport/tcp_transport.h"  // the class these members belong to
#include "runtime/transport/wire_security.h"

namespace korovod {
namespace {

constexpr size_t kTag = RecordKey::kTagBytes;
constexpr size_t kRecord = RecordKey::kRecordBytes;
constexpr int kRecordsPerPass = 4;  // per part, so that every socket gets its turn

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// The rest of a record's payload and tag, as at most two pieces.
int RecordIov(std::byte* payload, size_t len, size_t moved, unsigned char* tag, iovec* iov) {
  int n = 0;
  if (moved < len) iov[n++] = {payload + moved, len - moved};
  const size_t tag_moved = moved > len ? moved - len : 0;
  iov[n++] = {tag + tag_moved, kTag - tag_moved};
  return n;
}

}  // namespace

Status TcpTransport::SealedSendPass(const SendSpec& send, size_t& send_left, bool& progressed) {
  for (size_t i = 0; i < send_parts_.size(); ++i) {
    Part& p = send_parts_[i];
    RecordProgress& r = send_records_[i];
    const size_t part_len = p.end - p.begin;
    for (int k = 0; k < kRecordsPerPass && p.done < part_len; ++k) {
      std::byte* cipher = seal_staging_.data() + i * kRecord;
      if (r.len == 0) {
        r = RecordProgress{p.done, std::min(kRecord, part_len - p.done), 0, {}};
        RecordKey& key = mesh_->keys(send.peer, p.stream)->send;
        if (!key.Seal(encrypt_, send.data + p.begin + r.begin, r.len, cipher, r.tag)) {
          return Fail(key.exhausted() ? RecordsExhausted(mesh_->Describe(send.peer), p.stream + 1)
                                      : Internal("sealing a record for " +
                                                 mesh_->Describe(send.peer) + " failed"));
        }
      }
      // Integrity sends the caller's bytes; the cast only satisfies iovec (nothing writes them).
      std::byte* payload =
          encrypt_ ? cipher : const_cast<std::byte*>(send.data + p.begin + r.begin);
      iovec iov[2];
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = RecordIov(payload, r.len, r.moved, r.tag, iov);
      const ssize_t w = ::sendmsg(p.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && !WouldBlock(errno)) {
        const int err = errno;
        return Fail(mesh_->ExplainFailure(
            send.peer, ErrnoStatus(StatusCode::kUnavailable,
                                   "sending " + std::to_string(send.len) + " bytes to " +
                                       mesh_->Describe(send.peer) + " failed",
                                   err)));
      }
      if (w <= 0) break;
      progressed = true;
      r.moved += static_cast<size_t>(w);
      if (r.moved < r.len + kTag) break;  // the socket is full
      p.done += r.len;
      send_left -= r.len;
      r.len = 0;
    }
  }
  return OkStatus();
}

Status TcpTransport::SealedReceiveRecord(const RecvSpec& recv, size_t i, std::byte* payload) {
  Part& p = recv_parts_[i];
  RecordProgress& r = recv_records_[i];
  RecordKey& key = mesh_->keys(recv.peer, p.stream)->recv;
  const uint64_t record = key.records();
  if (!key.Open(encrypt_, payload, r.len, r.tag)) {
    Status s = key.exhausted() && record >= RecordKey::kMaxRecords
                   ? RecordsExhausted(mesh_->Describe(recv.peer), p.stream + 1)
                   : AuthenticationFailed(mesh_->Describe(recv.peer), p.stream + 1, record);
    // The stream can no longer be trusted: the peers stop now rather than at their deadline.
    mesh_->Abort(s);
    return Fail(s);
  }
  if (recv.dest == nullptr) (*recv.consume)(p.begin + r.begin, payload, r.len);
  p.done += r.len;
  p.consumed = p.done;
  r.len = 0;
  return OkStatus();
}

Status TcpTransport::SealedReceivePass(const RecvSpec& recv, size_t& recv_left,
                                       bool& progressed) {
  for (size_t i = 0; i < recv_parts_.size(); ++i) {
    Part& p = recv_parts_[i];
    RecordProgress& r = recv_records_[i];
    const size_t part_len = p.end - p.begin;
    for (int k = 0; k < kRecordsPerPass && p.done < part_len; ++k) {
      if (r.len == 0) r = RecordProgress{p.done, std::min(kRecord, part_len - p.done), 0, {}};
      std::byte* payload = recv.dest != nullptr ? recv.dest + p.begin + r.begin
                                                : staging_.data() + i * kRecord;
      iovec iov[2];
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = RecordIov(payload, r.len, r.moved, r.tag, iov);
      const ssize_t n = ::recvmsg(p.fd, &m, MSG_DONTWAIT);
      if (n == 0) {
        return Fail(mesh_->ExplainFailure(
            recv.peer, Unavailable(mesh_->Describe(recv.peer) + " closed the connection with " +
                                   std::to_string(recv_left) + " bytes of a " +
                                   std::to_string(recv.len) + "-byte message still to come")));
      }
      if (n < 0 && !WouldBlock(errno)) {
        const int err = errno;
        return Fail(mesh_->ExplainFailure(
            recv.peer,
            ErrnoStatus(StatusCode::kUnavailable,
                        "receiving from " + mesh_->Describe(recv.peer) + " failed", err)));
      }
      if (n < 0) break;
      progressed = true;
      r.moved += static_cast<size_t>(n);
      if (r.moved < r.len + kTag) break;  // the rest is in flight
      const size_t len = r.len;
      KV_RETURN_IF_ERROR(SealedReceiveRecord(recv, i, payload));
      recv_left -= len;
    }
  }
  return OkStatus();
}

Status TcpTransport::SealedExchange(const SendSpec& send, const RecvSpec& recv,
                                    Deadline deadline) {
  PlanParts(send.peer, send.len, &send_parts_);
  PlanParts(recv.peer, recv.len, &recv_parts_);
  send_records_.assign(send_parts_.size(), RecordProgress{});
  recv_records_.assign(recv_parts_.size(), RecordProgress{});
  // Grow-only buffers: a consumed record is verified in its part's window, an encrypted one
  // sealed into its part's buffer.
  if (recv.dest == nullptr && staging_.size() < recv_parts_.size() * kRecord) {
    staging_.resize(recv_parts_.size() * kRecord);
  }
  if (encrypt_ && seal_staging_.size() < send_parts_.size() * kRecord) {
    seal_staging_.resize(send_parts_.size() * kRecord);
  }
  size_t send_left = send.peer >= 0 ? send.len : 0;
  size_t recv_left = recv.peer >= 0 ? recv.len : 0;
  IdleWaiter idle(wait_);
  while (send_left > 0 || recv_left > 0) {
    bool progressed = false;
    KV_RETURN_IF_ERROR(SealedSendPass(send, send_left, progressed));
    KV_RETURN_IF_ERROR(SealedReceivePass(recv, recv_left, progressed));
    if (send_left == 0 && recv_left == 0) break;
    if (progressed) {
      idle.Reset();
      continue;
    }
    if (!idle.Pause()) continue;
    KV_RETURN_IF_ERROR(WaitForSockets(deadline));
    idle.Reset();
    if (deadline.Expired()) return TimedOut(send, recv, send_left, recv_left);
  }
  return OkStatus();
}

}  // namespace korovod
