#include "runtime/transport/peer_mesh.h"

#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/handshake_listener.h"

namespace korovod {
namespace {

constexpr uint32_t kControlMagic = 0x5443564b;  // "KVCT"
constexpr size_t kMaxReason = 2048;
// Ping asks "are you running?" and Pong answers it (ExplainTimeout); neither is a last word.
// kWireMode: the first frame on every control connection, the sender's wire security by name.
enum ControlType : uint32_t { kGoodbye = 1, kAbort = 2, kPing = 3, kPong = 4, kWireMode = 5 };
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
  secrets_.resize(peers_.size(), std::vector<ConnectionSecret>(streams_ + 1));
  control_keys_ = std::make_unique<ControlKeys[]>(peers_.size());
  watched_ = std::make_unique<std::atomic<bool>[]>(peers_.size());
  for (size_t p = 0; p < peers_.size(); ++p) watched_[p].store(false);
  pongs_ = std::make_unique<std::atomic<uint64_t>[]>(peers_.size());
  for (size_t p = 0; p < peers_.size(); ++p) pongs_[p].store(0);
}

std::string PeerMesh::Describe(int peer) const {
  return "rank " + std::to_string(peer) + " (" + peers_[peer].ToString() + ")";
}

// Connections per peer: tcp_streams (times 1 + lanes with collective lanes) plus the control one;
// ranks must agree on it.
constexpr char kLinksDiffer[] =
    ": tcp_streams or KOROVOD_COLLECTIVE_LANES differ between the ranks";

// Accepts connections from higher ranks on a thread while Connect dials the lower ranks. The
// handshakes run in a HandshakeListener: a connection that fails them (another key, garbage, a
// stalled Hello, an old epoch; an impostor or a misconfigured peer alike) is logged and counted
// there and never reaches this class, so it can neither fail the world nor take a genuine peer's
// slot; if the genuine peer never comes, the timeout names what was refused instead. Preflight
// probes (a higher rank checking that an address of ours works) are answered and closed.
class PeerMesh::Acceptor {
 public:
  Acceptor(PeerMesh& mesh, const TransportOptions& options, int links, int listen_fd,
           Deadline deadline)
      : mesh_(mesh),
        options_(options),
        links_(links),
        deadline_(deadline),
        me_(mesh.Describe(mesh.rank())),
        listener_(listen_fd,
                  HandshakeListenerOptions{options.job_key, options.epoch, me_,
                                           std::chrono::milliseconds(kHandshakeTimeout)},
                  [this](const Hello& h) { return Check(h); }),
        thread_([this] { Run(); }) {}
  ~Acceptor() { Join(); }
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  void Stop() { stop_.store(true); }  // dialing failed: stop accepting
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  // After Join: the connections that never came.
  const Status& accept_status() const { return accept_status_; }

 private:
  bool Complete() const {
    for (int p = mesh_.rank() + 1; p < mesh_.size(); ++p) {
      for (int s = 0; s < links_; ++s) {
        if (!mesh_.conns_[p][s].valid()) return false;
      }
    }
    return true;
  }

  // The listener's filter: what a Hello must claim to be answered at all.
  std::string Check(const Hello& h) const {
    const int rank = mesh_.rank();
    const bool probe = h.stream == kProbeStream;
    if (h.to != rank || h.world != mesh_.size() || h.from <= rank || h.from >= mesh_.size()) {
      return "not a higher rank of this world (to rank " + std::to_string(h.to) + ", size " +
             std::to_string(h.world) + ")";
    }
    if (!probe && (h.stream < 0 || h.stream >= links_)) {
      return "connection " + std::to_string(h.stream + 1) + ", but this rank expects " +
             std::to_string(links_) + " per peer" + kLinksDiffer;
    }
    return "";
  }

  void Run() {
    while (!Complete() && !stop_.load() && !deadline_.Expired()) {
      auto next = listener_.Next(deadline_.Sooner(std::chrono::milliseconds(100)));
      if (!next.ok()) {
        // This process cannot accept (out of descriptors): say so now, not blame a peer later.
        if (Status own = listener_.local_failure(); !own.ok()) {
          accept_status_ = own;
          return;
        }
        continue;
      }
      const Hello& h = next->hello;
      if (h.stream == kProbeStream) continue;  // answered; the prober closes it
      Fd& slot = mesh_.conns_[h.from][h.stream];
      if (slot.valid()) {
        // It proved the key, so it is the peer itself dialing again: keep the first.
        KV_LOG(kWarning, kTransport, "%s: %s opened connection %d twice; the second is closed",
               me_.c_str(), mesh_.Describe(h.from).c_str(), h.stream + 1);
        continue;
      }
      slot = std::move(next->fd);
      mesh_.secrets_[h.from][h.stream] = next->secret;
      // Named by the address it came from (its own listening address is what it dialed from).
    }
    if (!Complete()) RecordMissing();
  }

  void RecordMissing() {
    std::string missing;
    bool key_refused = false;
    for (int p = mesh_.rank() + 1; p < mesh_.size(); ++p) {
      int opened = 0;
      for (int s = 0; s < links_; ++s) opened += mesh_.conns_[p][s].valid() ? 1 : 0;
      if (opened == links_) continue;
      missing += (missing.empty() ? "" : ", ") + mesh_.Describe(p);
      key_refused = key_refused || listener_.KeyRefusedFor(p);
      // Some but not all: the peer dialed as many as it meant to.
      if (opened > 0) {
        missing += " (it opened " + std::to_string(opened) + " of the " + std::to_string(links_) +
                   " connections this rank expects: it stopped halfway (it failed or died), or "
                   "tcp_streams or KOROVOD_COLLECTIVE_LANES differ between the ranks)";
      }
    }
    const std::string text = me_ + " timed out after " +
                             std::to_string(options_.connect_timeout.count()) +
                             " ms waiting for " + missing + " to connect" +
                             listener_.RejectionSummary();
    // A connection claiming to be a missing rank failed the key check: most likely that rank
    // holds another job key, and the code says so (the text names the sources either way).
    accept_status_ = stop_.load()  ? Aborted("stopped accepting")
                     : key_refused ? PermissionDenied(text + " (the job keys differ?)")
                                   : DeadlineExceeded(text);
  }

  PeerMesh& mesh_;
  const TransportOptions& options_;
  const int links_;
  const Deadline deadline_;
  std::atomic<bool> stop_{false};
  Status accept_status_;
  const std::string me_;
  HandshakeListener listener_;
  std::thread thread_;  // last: starts once every member above is constructed
};

PeerMesh::Dialed PeerMesh::DialLowerRanks(const TransportOptions& options, int links,
                                          const DialPlanner& plan, Deadline deadline) {
  // The planner runs while the acceptor answers, so higher ranks can probe this one meanwhile.
  Dialed d{options.peers, OkStatus(), OkStatus()};
  d.status = plan ? plan(d.addresses, deadline) : OkStatus();
  const std::string me = Describe(rank_);
  for (int p = 0; p < rank_ && d.status.ok(); ++p) {
    const std::string who = "rank " + std::to_string(p) + " (" + d.addresses[p].ToString() + ")";
    for (int s = 0; s < links && d.status.ok(); ++s) {
      auto conn = ConnectTcp(d.addresses[p], deadline);
      if (!conn.ok()) {
        d.status = Status(conn.status().code(),
                          me + " could not reach " + who + ": " + conn.status().message());
        break;
      }
      Fd fd = std::move(conn).value();
      Status hs = DialHandshake(fd.get(), options.job_key, rank_, p, s, size(), options.epoch,
                                HandshakeDeadline(deadline), who, &secrets_[p][s]);
      if (hs.code() == StatusCode::kPermissionDenied) {
        if (d.auth_status.ok()) d.auth_status = PermissionDenied(me + ": " + hs.message());
        break;  // on to the next peer, which learns of the mismatch from us too
      }
      if (!hs.ok()) {
        d.status = hs.WithContext(me + " handshake with " + who);
        break;
      }
      conns_[p][s] = std::move(fd);
    }
  }
  return d;
}

StatusOr<std::unique_ptr<PeerMesh>> PeerMesh::Connect(const TransportOptions& options, int streams,
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
  if (options.wire_security != WireSecurity::kNone && options.job_key.empty()) {
    // Without a key the connection secrets follow from the nonces, which cross the wire.
    return InvalidArgument(std::string("KOROVOD_WIRE_SECURITY=") +
                           WireSecurityName(options.wire_security) +
                           " needs a job key (KOROVOD_JOB_KEY or KOROVOD_JOB_KEY_FILE)");
  }
  auto mesh = std::make_unique<PeerMesh>(rank, options.peers, streams);
  mesh->wire_security_ = options.wire_security;
  const Deadline deadline = Deadline::After(options.connect_timeout);
  if (size == 1) return mesh;

  Fd owned_listener;
  int listen_fd = options.listen_fd;
  if (listen_fd < 0 && rank < size - 1) {
    // Listen on every interface: peers[rank].host is how others reach us, which behind NAT or in
    // a pod need not be an address bound here.
    KV_ASSIGN_OR_RETURN(owned_listener, ListenTcp("0.0.0.0", options.peers[rank].port, 128));
    listen_fd = owned_listener.get();
  }

  const int links = streams + 1;  // data streams + the control connection
  Acceptor acceptor(*mesh, options, links, listen_fd, deadline);
  Dialed dialed = mesh->DialLowerRanks(options, links, plan, deadline);
  if (!dialed.status.ok()) acceptor.Stop();
  acceptor.Join();
  for (const Status& s : {dialed.auth_status, dialed.status, acceptor.accept_status()}) {
    if (s.ok()) continue;
    // The peers whose connections to this rank are complete go on to use them: tell them why
    // this rank gives up, or they would only see it close and name this rank as the cause.
    mesh->Abort(s);
    return s;
  }

  for (int p = 0; p < rank; ++p) mesh->peers_[p] = dialed.addresses[p];
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    for (int s = 0; s < links; ++s) KV_RETURN_IF_ERROR(SetNonBlocking(mesh->fd(p, s), true));
  }
  KV_RETURN_IF_ERROR(mesh->SetUpWireSecurity(options, deadline));
  for (int p = 0; p < size; ++p) {
    if (p != rank) mesh->watched_[p].store(true, std::memory_order_release);
  }
  return mesh;
}

Status PeerMesh::Probe(const PeerAddress& addr, const std::string& job_key, uint32_t epoch,
                       int from, int to, int world, Deadline connect_deadline, Deadline deadline) {
  const std::string who = "rank " + std::to_string(to) + " (" + addr.ToString() + ")";
  KV_ASSIGN_OR_RETURN(Fd fd, ConnectTcp(addr, connect_deadline));
  return DialHandshake(fd.get(), job_key, from, to, kProbeStream, world, epoch,
                       HandshakeDeadline(deadline), who);
}

std::string PeerMesh::LocalIp(int peer) const {
  return peer == rank_ ? "" : SocketIp(conns_[peer][streams_].get(), /*local=*/true);
}

std::string PeerMesh::RemoteIp(int peer) const {
  return peer == rank_ ? "" : SocketIp(conns_[peer][streams_].get(), /*local=*/false);
}

namespace {

// A control frame: header, reason, and with a job key the GCM tag over both (the header is the
// additional data; the reason is encrypted in encrypt mode once the modes are agreed).
std::string ControlFrame(uint32_t type, const std::string& reason, RecordKey* key, bool encrypt) {
  const std::string r = reason.substr(0, kMaxReason);
  const size_t tag = key != nullptr ? RecordKey::kTagBytes : 0;
  std::string msg(sizeof(ControlHeader) + r.size() + tag, '\0');
  const ControlHeader h{kControlMagic, type, static_cast<uint32_t>(r.size())};
  std::memcpy(msg.data(), &h, sizeof h);
  std::memcpy(msg.data() + sizeof h, r.data(), r.size());
  if (key != nullptr) {
    auto* body = reinterpret_cast<std::byte*>(msg.data() + sizeof h);
    auto* t = reinterpret_cast<unsigned char*>(msg.data() + sizeof h + r.size());
    if (!key->Seal(encrypt, body, r.size(), body, t, &h, sizeof h)) return "";
  }
  return msg;
}

}  // namespace

void PeerMesh::SendControl(int peer, uint32_t type, const std::string& reason) {
  ControlKeys& ck = control_keys_[peer];
  const std::string msg =
      ControlFrame(type, reason, ck.keyed ? &ck.keys.send : nullptr, ck.encrypt);
  // Best effort: a few hundred bytes always fit an idle socket's buffer.
  (void)::send(conns_[peer][streams_].get(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

Status PeerMesh::SetUpWireSecurity(const TransportOptions& options, Deadline deadline) {
  const bool keyed = !options.job_key.empty();
  if (wire_security_ != WireSecurity::kNone) keys_.resize(peers_.size());
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    const bool dialer = p < rank_;  // this rank dialed every connection to a lower rank
    if (!keys_.empty()) {
      keys_[p] = std::vector<ConnectionKeys>(streams_);
      for (int s = 0; s < streams_; ++s) {
        KV_RETURN_IF_ERROR(InitConnectionKeys(secrets_[p][s], dialer, &keys_[p][s]));
      }
    }
    control_keys_[p].keyed = keyed;
    if (keyed) {
      KV_RETURN_IF_ERROR(
          InitConnectionKeys(secrets_[p][streams_], dialer, &control_keys_[p].keys));
    }
  }
  for (auto& per_peer : secrets_) {
    for (auto& secret : per_peer) OPENSSL_cleanse(secret.bytes.data(), secret.bytes.size());
  }
  secrets_.clear();
  KV_RETURN_IF_ERROR(AgreeOnWireSecurity(deadline));
  for (int p = 0; p < size(); ++p) {
    control_keys_[p].encrypt = wire_security_ == WireSecurity::kEncrypt;
  }
  return OkStatus();
}

Status PeerMesh::AgreeOnWireSecurity(Deadline deadline) {
  const std::string mine = WireSecurityName(wire_security_);
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    ControlKeys& ck = control_keys_[p];
    const std::string msg = ControlFrame(kWireMode, mine, ck.keyed ? &ck.keys.send : nullptr,
                                         /*encrypt=*/false);
    KV_RETURN_IF_ERROR(WriteFull(conns_[p][streams_].get(), msg.data(), msg.size(), deadline,
                                 Describe(p)));
  }
  constexpr uint32_t kMaxName = 32;
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    ControlKeys& ck = control_keys_[p];
    const int fd = conns_[p][streams_].get();
    ControlHeader h{};
    KV_RETURN_IF_ERROR(ReadFull(fd, &h, sizeof h, deadline, Describe(p)));
    if (h.magic == kControlMagic && h.type == kAbort && h.len <= kMaxReason) {
      // The peer failed to connect to another rank and told us before any keys existed (Connect).
      std::string reason(h.len, '\0');
      KV_RETURN_IF_ERROR(ReadFull(fd, reason.data(), h.len, deadline, Describe(p)));
      return Aborted(Describe(p) + " gave up while connecting (unauthenticated): " + reason);
    }
    if (h.magic != kControlMagic || h.type != kWireMode || h.len > kMaxName) {
      return Internal("garbled wire security announcement from " + Describe(p));
    }
    char body[kMaxName + RecordKey::kTagBytes];
    const size_t tag = ck.keyed ? RecordKey::kTagBytes : 0;
    KV_RETURN_IF_ERROR(ReadFull(fd, body, h.len + tag, deadline, Describe(p)));
    if (ck.keyed && !ck.keys.recv.Open(false, reinterpret_cast<std::byte*>(body), h.len,
                                       reinterpret_cast<unsigned char*>(body + h.len), &h,
                                       sizeof h)) {
      return AuthenticationFailed(Describe(p), streams_ + 1, 0);
    }
    const std::string theirs(body, h.len);
    if (theirs != mine) {
      return InvalidArgument(Describe(p) + " runs KOROVOD_WIRE_SECURITY=" + theirs +
                             ", this rank " + mine + ": set it alike on every rank");
    }
  }
  return OkStatus();
}

PeerMesh::~PeerMesh() {
  for (int p = 0; p < size(); ++p) {
    if (p == rank_ || !conns_[p][streams_].valid()) continue;
    if (!aborted_) SendControl(p, kGoodbye, "");
    for (auto& c : conns_[p]) ::shutdown(c.get(), SHUT_RDWR);
  }
}

void PeerMesh::Abort(const Status& why) {
  std::lock_guard<std::mutex> lock(control_mu_);
  if (aborted_) return;
  aborted_ = true;
  if (failure_.ok()) failure_ = why.ok() ? Aborted("this rank aborted") : why;
  for (int p = 0; p < size(); ++p) {
    if (p != rank_ && conns_[p][streams_].valid()) {
      SendControl(p, kAbort, why.message());
    }
  }
}

Status PeerMesh::failure() const {
  std::lock_guard<std::mutex> lock(control_mu_);
  return failure_;
}

Status PeerMesh::OnControlEvent(int peer) {
  std::lock_guard<std::mutex> lock(control_mu_);
  // Another transport of this mesh may have read the peer's last word first.
  if (!watched_[peer].load(std::memory_order_relaxed)) return failure_;
  Status s = ReadControl(peer);
  if (!s.ok() && failure_.ok()) failure_ = s;
  return s;
}

// Part of a control message is readable: the rest is in flight, unless the peer has closed (then
// it never comes, and reading the part as "in flight" on every wake-up would hide the death).
Status PeerMesh::PartialControl(int fd, int peer) {
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) {
    return OkStatus();
  }
  watched_[peer].store(false, std::memory_order_release);
  return Unavailable(Describe(peer) + " died: its connection closed in the middle of a message");
}

Status PeerMesh::ReadControl(int peer) {
  const int fd = conns_[peer][streams_].get();
  ControlKeys& ck = control_keys_[peer];
  const size_t tag = ck.keyed ? RecordKey::kTagBytes : 0;
  char buf[sizeof(ControlHeader) + kMaxReason + RecordKey::kTagBytes];
  // Pings and pongs may precede a last word: every whole message that has arrived is read.
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return OkStatus();
    if (n >= static_cast<ssize_t>(sizeof(ControlHeader))) {
      ControlHeader h;
      std::memcpy(&h, buf, sizeof h);
      if (h.magic != kControlMagic || h.len > kMaxReason) {
        watched_[peer].store(false, std::memory_order_release);
        return Internal("garbled control message from " + Describe(peer));
      }
      if (static_cast<size_t>(n) < sizeof h + h.len + tag) return PartialControl(fd, peer);
      (void)::recv(fd, buf, sizeof h + h.len + tag, MSG_DONTWAIT);
      auto* body = reinterpret_cast<std::byte*>(buf + sizeof h);
      if (ck.keyed && !ck.keys.recv.Open(ck.encrypt, body, h.len,
                                         reinterpret_cast<unsigned char*>(buf + sizeof h + h.len),
                                         &h, sizeof h)) {
        // Injected or altered: not the peer's word, and the connection can no longer be trusted.
        watched_[peer].store(false, std::memory_order_release);
        return AuthenticationFailed(Describe(peer), streams_ + 1, ck.keys.recv.records() - 1);
      }
      if (h.type == kPing) {
        SendControl(peer, kPong, "");  // this rank runs: whatever it waits for, it is not stuck
        continue;
      }
      if (h.type == kPong) {
        pongs_[peer].fetch_add(1, std::memory_order_acq_rel);
        continue;
      }
      watched_[peer].store(false,
                           std::memory_order_release);  // a peer's last word: nothing follows it
      if (h.type == kGoodbye) return OkStatus();
      return Aborted(Describe(peer) + " gave up: " + std::string(buf + sizeof h, h.len));
    }
    if (n > 0) return PartialControl(fd, peer);  // a partial header
    watched_[peer].store(false, std::memory_order_release);
    return Unavailable(Describe(peer) + " died: its connection closed without a goodbye");
  }
}

Status PeerMesh::PollControl(Deadline until, const std::function<bool()>& done) {
  while (!done()) {
    Status recorded = failure();
    if (!recorded.ok()) return recorded;  // another transport of this mesh read a failure
    std::vector<pollfd> fds;
    std::vector<int> who;
    WatchedControlFds(fds, who);
    if (until.Expired()) break;
    const int wait = std::min(50, std::max(0, until.RemainingMs()));
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
      continue;
    }
    if (::poll(fds.data(), fds.size(), wait) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) KV_RETURN_IF_ERROR(OnControlEvent(who[i]));
    }
  }
  return OkStatus();
}

Status PeerMesh::ExplainTimeout(const std::vector<int>& waited_for, Status error) {
  std::vector<int> asked;
  std::vector<uint64_t> before;
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    for (int p : waited_for) {
      if (p < 0 || p == rank_ || p >= size() || !watched_[p].load(std::memory_order_acquire) ||
          std::find(asked.begin(), asked.end(), p) != asked.end()) {
        continue;
      }
      asked.push_back(p);
      before.push_back(pongs_[p].load(std::memory_order_acquire));
      SendControl(p, kPing, "");
    }
  }
  if (asked.empty()) return error;
  auto answered = [&](size_t i) { return pongs_[asked[i]].load() != before[i]; };
  auto all_answered = [&] {
    for (size_t i = 0; i < asked.size(); ++i) {
      if (!answered(i)) return false;
    }
    return true;
  };
  KV_RETURN_IF_ERROR(PollControl(Deadline::After(kPingWait), all_answered));
  std::string silent;
  for (size_t i = 0; i < asked.size(); ++i) {
    if (!answered(i)) silent += (silent.empty() ? "" : ", ") + Describe(asked[i]);
  }
  if (!silent.empty()) {
    return Status(error.code(), error.message() + " (" + silent +
                                    " did not answer a ping within " +
                                    std::to_string(kPingWait.count()) +
                                    " ms: stopped or hung, or the link is cut or congested)");
  }
  // Every rank waited for runs, so it waits for another in turn: that one's abort names the cause.
  KV_RETURN_IF_ERROR(PollControl(Deadline::After(kRelayWait), [] { return false; }));
  std::string alive;
  for (int p : asked) alive += (alive.empty() ? "" : ", ") + Describe(p);
  return Status(error.code(), error.message() + " (" + alive +
                                  " answered, so it runs and waits for another rank in turn)");
}

void PeerMesh::WatchedControlFds(std::vector<pollfd>& fds, std::vector<int>& who) const {
  for (int p = 0; p < size(); ++p) {
    if (watch_fd(p) < 0) continue;
    fds.push_back({watch_fd(p), POLLIN | POLLRDHUP, 0});
    who.push_back(p);
  }
}

Status PeerMesh::CheckPeersAlive() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  WatchedControlFds(fds, who);
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
