#include "runtime/transport/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace korovod {
namespace {

constexpr size_t kMaxIo = 1 << 20;             // bytes per send/recv call
constexpr size_t kConsumeGranule = 256 << 10;  // hand received bytes on at this size
constexpr size_t kStripeAlign = 4096;          // part boundaries: whole elements of any type
constexpr int kPollSliceMs = 100;              // re-check the deadline this often

}  // namespace

TcpTransport::TcpTransport(std::shared_ptr<PeerMesh> mesh, size_t stripe_min, WaitPolicy wait,
                           int first_stream, int streams)
    : mesh_(std::move(mesh)),
      stripe_min_(stripe_min),
      first_stream_(first_stream),
      streams_(streams > 0 ? streams : mesh_->streams() - first_stream),
      wait_(wait),
      sealed_(mesh_->wire_security() != WireSecurity::kNone),
      encrypt_(mesh_->wire_security() == WireSecurity::kEncrypt) {}

void TcpTransport::PlanParts(int peer, size_t len, std::vector<Part>* parts) const {
  parts->clear();
  if (peer < 0 || len == 0) return;
  const int streams = len >= stripe_min_ ? streams_ : 1;
  size_t part = (len + streams - 1) / streams;
  part = (part + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  for (int s = 0; s < streams; ++s) {
    const size_t b = std::min(len, s * part);
    const size_t e = std::min(len, b + part);
    if (b < e) {
      parts->push_back(Part{mesh_->fd(peer, first_stream_ + s), b, e, 0, 0, first_stream_ + s});
    }
  }
}

Status TcpTransport::Fail(Status s) {
  if (broken_.ok()) broken_ = s;
  return s;
}

Status TcpTransport::SendPass(const SendSpec& send, size_t& send_left, bool& progressed) {
  for (Part& p : send_parts_) {
    if (p.done == p.end - p.begin) continue;
    const size_t n = std::min(kMaxIo, p.end - p.begin - p.done);
    const ssize_t w = ::send(p.fd, send.data + p.begin + p.done, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p.done += static_cast<size_t>(w);
      send_left -= static_cast<size_t>(w);
      progressed = true;
    } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      return Fail(mesh_->ExplainFailure(
          send.peer, ErrnoStatus(StatusCode::kUnavailable,
                                 "sending " + std::to_string(send.len) + " bytes to " +
                                     mesh_->Describe(send.peer) + " failed",
                                 err)));
    }
  }
  return OkStatus();
}

Status TcpTransport::ReceivePass(const RecvSpec& recv, size_t window_bytes, size_t& recv_left,
                                 bool& progressed) {
  for (size_t i = 0; i < recv_parts_.size(); ++i) {
    Part& p = recv_parts_[i];
    const size_t part_len = p.end - p.begin;
    if (p.done == part_len) continue;
    std::byte* window = staging_.data() + i * window_bytes;
    std::byte* to;
    size_t n;
    if (recv.dest != nullptr) {
      to = recv.dest + p.begin + p.done;
      n = std::min(kMaxIo, part_len - p.done);
    } else {
      const size_t filled = p.done - p.consumed;
      to = window + filled;
      n = std::min(kConsumeGranule - filled, part_len - p.done);
    }
    const ssize_t r = ::recv(p.fd, to, n, MSG_DONTWAIT);
    if (r > 0) {
      p.done += static_cast<size_t>(r);
      recv_left -= static_cast<size_t>(r);
      progressed = true;
    } else if (r == 0) {
      return Fail(mesh_->ExplainFailure(
          recv.peer, Unavailable(mesh_->Describe(recv.peer) + " closed the connection with " +
                                 std::to_string(recv_left) + " bytes of a " +
                                 std::to_string(recv.len) + "-byte message still to come")));
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      const int err = errno;
      return Fail(mesh_->ExplainFailure(
          recv.peer, ErrnoStatus(StatusCode::kUnavailable,
                                 "receiving from " + mesh_->Describe(recv.peer) + " failed", err)));
    }
    // Window boundaries are multiples of the granule and parts end on element boundaries, so
    // every piece handed on is whole elements.
    const size_t filled = p.done - p.consumed;
    if (recv.dest == nullptr && filled > 0 && (filled == kConsumeGranule || p.done == part_len)) {
      (*recv.consume)(p.begin + p.consumed, window, filled);
      p.consumed = p.done;
    }
  }
  return OkStatus();
}

Status TcpTransport::WaitForSockets(Deadline deadline) {
  std::vector<pollfd>& pfds = pollfds_;
  std::vector<int>& pfd_peer = pollfd_peer_;
  pfds.clear();
  pfd_peer.clear();
  for (const Part& p : send_parts_) {
    if (p.done < p.end - p.begin) {
      pfds.push_back({p.fd, POLLOUT, 0});
      pfd_peer.push_back(-1);
    }
  }
  for (const Part& p : recv_parts_) {
    if (p.done < p.end - p.begin) {
      pfds.push_back({p.fd, POLLIN, 0});
      pfd_peer.push_back(-1);
    }
  }
  for (int peer = 0; peer < mesh_->size(); ++peer) {
    if (mesh_->watch_fd(peer) < 0) continue;
    pfds.push_back({mesh_->watch_fd(peer), POLLIN | POLLRDHUP, 0});
    pfd_peer.push_back(peer);
  }
  const int rc = ::poll(pfds.data(), pfds.size(), std::min(kPollSliceMs, deadline.RemainingMs()));
  if (rc > 0) {
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfd_peer[i] >= 0 && pfds[i].revents != 0) {
        Status s = mesh_->OnControlEvent(pfd_peer[i]);
        if (!s.ok()) return Fail(s);
      }
    }
  }
  // A peer's last word read by another transport of this mesh, or this rank's abort.
  Status failure = mesh_->failure();
  if (!failure.ok()) return Fail(failure);
  return OkStatus();
}

Status TcpTransport::Exchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline) {
  if (!broken_.ok()) return broken_;
  if (send.peer == mesh_->rank() || recv.peer == mesh_->rank()) {
    return InvalidArgument("a rank cannot exchange with itself");
  }
  if (sealed_) return SealedExchange(send, recv, deadline);
  PlanParts(send.peer, send.len, &send_parts_);
  PlanParts(recv.peer, recv.len, &recv_parts_);
  // Consumed messages land in one granule-sized window per stream, reused as soon as the consumer
  // has taken it, so the bytes are still in cache when they are reduced.
  const size_t window_bytes = recv.dest == nullptr ? kConsumeGranule : 0;
  if (staging_.size() < recv_parts_.size() * window_bytes) {
    staging_.resize(recv_parts_.size() * window_bytes);
  }
  size_t send_left = send.peer >= 0 ? send.len : 0;
  size_t recv_left = recv.peer >= 0 ? recv.len : 0;

  IdleWaiter idle(wait_);
  while (send_left > 0 || recv_left > 0) {
    bool progressed = false;
    KV_RETURN_IF_ERROR(SendPass(send, send_left, progressed));
    KV_RETURN_IF_ERROR(ReceivePass(recv, window_bytes, recv_left, progressed));
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

Status TcpTransport::TimedOut(const SendSpec& send, const RecvSpec& recv, size_t send_left,
                              size_t recv_left) {
  std::string what;
  if (recv_left > 0) {
    what = "waiting to receive " + std::to_string(recv_left) + " of " + std::to_string(recv.len) +
           " bytes from " + mesh_->Describe(recv.peer);
  }
  if (send_left > 0) {
    what += (what.empty() ? "" : " and ") + std::string("waiting to send ") +
            std::to_string(send_left) + " of " + std::to_string(send.len) + " bytes to " +
            mesh_->Describe(send.peer);
  }
  // The peer waited for may be waiting for another rank itself: ExplainTimeout tells a stopped
  // or cut-off peer from a running one, and takes the cause from the latter's abort.
  std::vector<int> waited_for;
  if (recv_left > 0) waited_for.push_back(recv.peer);
  if (send_left > 0) waited_for.push_back(send.peer);
  return Fail(mesh_->ExplainTimeout(waited_for, DeadlineExceeded("timed out " + what)));
}

}  // namespace korovod
