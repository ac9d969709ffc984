#include "runtime/transport/peer_mesh.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/transport/handshake.h"

namespace korovod {
namespace {

constexpr uint32_t kControlMagic = 0x5443564b;  // "KVCT"
constexpr size_t kMaxReason = 2048;
enum ControlType : uint32_t { kGoodbye = 1, kAbort = 2 };
struct ControlHeader {
  uint32_t magic;
  uint32_t type;
  uint32_t len;  // reason bytes that follow
};
constexpr auto kHandshakeTimeout = std::chrono::milliseconds(5000);

Deadline HandshakeDeadline(const Deadline& overall) {
  return Deadline(std::min(overall.at(), Clock::now() + kHandshakeTimeout));
}

}  // namespace

PeerMesh::PeerMesh(int rank, std::vector<PeerAddress> peers, int streams)
    : rank_(rank), peers_(std::move(peers)), streams_(streams) {
  conns_.resize(peers_.size());
  for (auto& c : conns_) c.resize(streams_ + 1);
  watched_.assign(peers_.size(), false);
}

std::string PeerMesh::Describe(int peer) const {
  return "rank " + std::to_string(peer) + " (" + peers_[peer].ToString() + ")";
}

StatusOr<std::unique_ptr<PeerMesh>> PeerMesh::Connect(const WorldOptions& options, int streams,
                                                      const DialPlanner& plan) {
  const int size = static_cast<int>(options.peers.size());
  const int rank = options.rank;
  if (size <= 0) return InvalidArgument("world has no ranks");
  if (rank < 0 || rank >= size) {
    return InvalidArgument("rank " + std::to_string(rank) + " is outside the world of size " +
                           std::to_string(size));
  }
  if (streams < 1 || streams > 64) {
    return InvalidArgument("tcp_streams must be in [1, 64], got " + std::to_string(streams));
  }
  auto mesh = std::make_unique<PeerMesh>(rank, options.peers, streams);
  const Deadline deadline = Deadline::After(options.connect_timeout);
  const std::string me = mesh->Describe(rank);
  if (size == 1) return mesh;

  Fd owned_listener;
  int listen_fd = options.listen_fd;
  if (listen_fd < 0 && rank < size - 1) {
    // Listen on every interface: peers[rank].host is how others reach us, which behind NAT or in
    // a pod need not be an address bound here.
    KV_ASSIGN_OR_RETURN(owned_listener, ListenTcp("0.0.0.0", options.peers[rank].port, 128));
    listen_fd = owned_listener.get();
  }

  // Accept connections from higher ranks on a thread while this one dials the lower ranks.
  // A peer holding another key is refused, and the rest carry on, so that every rank, not only
  // the first to meet it, learns which rank has the wrong key. Preflight probes (a higher rank
  // checking that an address of ours works) are answered and closed; one that gives up halfway
  // is not mistaken for a peer with another key.
  std::atomic<bool> stop{false};  // dialing failed: stop accepting
  std::mutex mu;
  Status accept_status, auth_status;
  std::string rejections;
  std::vector<bool> refused(size, false);  // peers whose key did not match (guarded by mu)
  const int links = streams + 1;           // data streams + the control connection
  auto complete = [&] {
    std::lock_guard<std::mutex> lock(mu);
    for (int p = rank + 1; p < size; ++p) {
      if (refused[p]) continue;
      for (int s = 0; s < links; ++s) {
        if (!mesh->conns_[p][s].valid()) return false;
      }
    }
    return true;
  };
  std::thread acceptor([&] {
    while (!complete() && !stop.load()) {
      const Deadline slice = Deadline::After(
          std::chrono::milliseconds(std::min(100, std::max(0, deadline.RemainingMs()))));
      auto accepted = AcceptTcp(listen_fd, slice);
      if (!accepted.ok()) {
        if (deadline.Expired()) break;
        continue;
      }
      Fd fd = std::move(accepted).value();
      const Deadline hs = HandshakeDeadline(deadline);
      auto read = ReadHello(fd.get(), hs);
      if (!read.ok()) {
        if (read.status().code() == StatusCode::kInvalidArgument) {
          std::lock_guard<std::mutex> lock(mu);
          rejections += "; rejected " + read.status().message();
        }
        continue;  // a connection that closed or stalled before its hello: not a peer yet
      }
      const Hello& hello = read.value();
      const bool probe = hello.stream == kProbeStream;
      std::string reject;
      if (hello.to != rank || hello.world != size || hello.from <= rank || hello.from >= size ||
          (!probe && (hello.stream < 0 || hello.stream >= links))) {
        reject = "rank " + std::to_string(hello.from) + " with an unexpected world (to rank " +
                 std::to_string(hello.to) + ", size " + std::to_string(hello.world) + ")";
      } else if (!probe && mesh->conns_[hello.from][hello.stream].valid()) {
        reject = "a duplicate connection claiming to be rank " + std::to_string(hello.from);
      }
      if (!reject.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        rejections += "; rejected " + reject;
        continue;
      }
      const std::string who = mesh->Describe(hello.from);
      const AcceptOutcome outcome = AnswerHello(fd.get(), options.job_key, hello, hs, who);
      if (outcome == AcceptOutcome::kFailed) continue;
      if (probe) {
        // Whatever became of a probe, the real connections are still to come: a prober with
        // another key reports that itself, and we keep it only for a later timeout message.
        if (outcome != AcceptOutcome::kAuthenticated) {
          std::lock_guard<std::mutex> lock(mu);
          rejections +=
              "; " + who + "'s preflight probe " +
              (outcome == AcceptOutcome::kWrongKey ? "presented a wrong job key"
                                                   : "hung up on this rank's proof of the job key");
        }
        continue;  // answered; the prober closes it
      }
      if (outcome == AcceptOutcome::kHungUp || outcome == AcceptOutcome::kWrongKey) {
        // A peer that passed the hello hangs up on our proof only when its key differs: fail
        // now, naming it, rather than waiting out the connect deadline.
        std::lock_guard<std::mutex> lock(mu);
        if (auth_status.ok()) {
          auth_status =
              PermissionDenied(me + ": " + who +
                               (outcome == AcceptOutcome::kHungUp
                                    ? " rejected this rank's proof of the job key (the job keys "
                                      "differ)"
                                    : " presented a wrong job key"));
        }
        refused[hello.from] = true;
        continue;
      }
      mesh->conns_[hello.from][hello.stream] = std::move(fd);
    }
    if (!complete()) {
      std::string missing;
      for (int p = rank + 1; p < size; ++p) {
        for (int s = 0; s < links && !refused[p]; ++s) {
          if (!mesh->conns_[p][s].valid()) {
            missing += (missing.empty() ? "" : ", ") + mesh->Describe(p);
            break;
          }
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      accept_status =
          stop.load() ? Aborted("stopped accepting")
                      : DeadlineExceeded(me + " timed out after " +
                                         std::to_string(options.connect_timeout.count()) +
                                         " ms waiting for " + missing + " to connect" + rejections);
    }
  });

  // The planner runs while the acceptor answers, so higher ranks can probe this one meanwhile.
  std::vector<PeerAddress> dial = options.peers;
  Status dial_status = plan ? plan(dial, deadline) : OkStatus();
  Status dial_auth_status;
  for (int p = 0; p < rank && dial_status.ok(); ++p) {
    const std::string who = "rank " + std::to_string(p) + " (" + dial[p].ToString() + ")";
    for (int s = 0; s < links && dial_status.ok(); ++s) {
      auto conn = ConnectTcp(dial[p], deadline);
      if (!conn.ok()) {
        dial_status = Status(conn.status().code(),
                             me + " could not reach " + who + ": " + conn.status().message());
        break;
      }
      Fd fd = std::move(conn).value();
      Status hs = DialHandshake(fd.get(), options.job_key, rank, p, s, size,
                                HandshakeDeadline(deadline), who);
      if (hs.code() == StatusCode::kPermissionDenied) {
        if (dial_auth_status.ok()) dial_auth_status = PermissionDenied(me + ": " + hs.message());
        break;  // on to the next peer, which learns of the mismatch from us too
      }
      if (!hs.ok()) {
        dial_status = hs.WithContext(me + " handshake with " + who);
        break;
      }
      mesh->conns_[p][s] = std::move(fd);
    }
  }
  if (!dial_status.ok()) stop.store(true);
  acceptor.join();
  KV_RETURN_IF_ERROR(dial_auth_status);
  KV_RETURN_IF_ERROR(auth_status);
  KV_RETURN_IF_ERROR(dial_status);
  KV_RETURN_IF_ERROR(accept_status);

  for (int p = 0; p < rank; ++p) mesh->peers_[p] = dial[p];
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    for (int s = 0; s < links; ++s) KV_RETURN_IF_ERROR(SetNonBlocking(mesh->fd(p, s), true));
    mesh->watched_[p] = true;
  }
  return mesh;
}

Status PeerMesh::Probe(const PeerAddress& addr, const std::string& job_key, int from, int to,
                       int world, Deadline connect_deadline, Deadline deadline) {
  const std::string who = "rank " + std::to_string(to) + " (" + addr.ToString() + ")";
  KV_ASSIGN_OR_RETURN(Fd fd, ConnectTcp(addr, connect_deadline));
  return DialHandshake(fd.get(), job_key, from, to, kProbeStream, world,
                       HandshakeDeadline(deadline), who);
}

std::string PeerMesh::LocalIp(int peer) const {
  return peer == rank_ ? "" : SocketIp(conns_[peer][streams_].get(), /*local=*/true);
}

std::string PeerMesh::RemoteIp(int peer) const {
  return peer == rank_ ? "" : SocketIp(conns_[peer][streams_].get(), /*local=*/false);
}

namespace {

void SendControl(int fd, ControlType type, const std::string& reason) {
  const std::string r = reason.substr(0, kMaxReason);
  std::string msg(sizeof(ControlHeader) + r.size(), '\0');
  const ControlHeader h{kControlMagic, type, static_cast<uint32_t>(r.size())};
  std::memcpy(msg.data(), &h, sizeof h);
  std::memcpy(msg.data() + sizeof h, r.data(), r.size());
  // Best effort: a few hundred bytes always fit an idle socket's buffer.
  (void)::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

PeerMesh::~PeerMesh() {
  for (int p = 0; p < size(); ++p) {
    if (p == rank_ || !conns_[p][streams_].valid()) continue;
    if (!aborted_) SendControl(conns_[p][streams_].get(), kGoodbye, "");
    for (auto& c : conns_[p]) ::shutdown(c.get(), SHUT_RDWR);
  }
}

void PeerMesh::Abort(const Status& why) {
  if (aborted_) return;
  aborted_ = true;
  for (int p = 0; p < size(); ++p) {
    if (p != rank_ && conns_[p][streams_].valid()) {
      SendControl(conns_[p][streams_].get(), kAbort, why.message());
    }
  }
}

Status PeerMesh::OnControlEvent(int peer) {
  const int fd = conns_[peer][streams_].get();
  char buf[sizeof(ControlHeader) + kMaxReason];
  const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return OkStatus();
  if (n >= static_cast<ssize_t>(sizeof(ControlHeader))) {
    ControlHeader h;
    std::memcpy(&h, buf, sizeof h);
    if (h.magic != kControlMagic || h.len > kMaxReason) {
      watched_[peer] = false;
      return Internal("garbled control message from " + Describe(peer));
    }
    if (static_cast<size_t>(n) < sizeof h + h.len) return OkStatus();  // rest still in flight
    (void)::recv(fd, buf, sizeof h + h.len, MSG_DONTWAIT);
    watched_[peer] = false;  // a peer's last word: nothing follows it
    if (h.type == kGoodbye) return OkStatus();
    return Aborted(Describe(peer) + " gave up: " + std::string(buf + sizeof h, h.len));
  }
  if (n > 0) return OkStatus();  // a partial header: the rest is in flight
  watched_[peer] = false;
  return Unavailable(Describe(peer) + " died: its connection closed without a goodbye");
}

Status PeerMesh::CheckPeersAlive() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (int p = 0; p < size(); ++p) {
    if (watch_fd(p) < 0) continue;
    fds.push_back({watch_fd(p), POLLIN | POLLRDHUP, 0});
    who.push_back(p);
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return OkStatus();
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) KV_RETURN_IF_ERROR(OnControlEvent(who[i]));
  }
  return OkStatus();
}

Status PeerMesh::ExplainFailure(int peer, Status error) {
  // The peer's last word was sent before its data connections closed; give it a moment.
  const Deadline grace = Deadline::After(std::chrono::milliseconds(200));
  while (watch_fd(peer) >= 0 && !grace.Expired()) {
    pollfd p{watch_fd(peer), POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, grace.RemainingMs()) <= 0) break;
    Status s = OnControlEvent(peer);
    if (!s.ok()) return s;
  }
  Status others = CheckPeersAlive();
  return others.ok() ? error : others;
}

}  // namespace korovod
