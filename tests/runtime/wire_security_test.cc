// Wire security (KOROVOD_WIRE_SECURITY, runtime/transport/wire_security.h): every mode moves
// allreduce, allgather and alltoall exactly over TCP (2 and 3 ranks, striped, with collective
// lanes); with integrity or encrypt a byte flipped or a record replayed on the way (a relay
// between two ranks) fails the op on the receiver naming the sender, and the sender is told; a
// forged abort on the control connection is not believed; encrypt leaves no plaintext on the
// wire; ranks with different modes fail at start naming both.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "runtime/transport/socket.h"
#include "runtime/transport/wire_security.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {
namespace {

using std::chrono::milliseconds;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- Results in every mode ----

struct Shape {
  WireSecurity mode;
  int size;
  int streams;  // 1: one connection; 4: striped (stripe_min 64 KiB)
  int lanes;    // > 1: collectives run concurrently on lanes too
};

std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return std::string(WireSecurityName(s.mode)) + "_n" + std::to_string(s.size) + "_streams" +
         std::to_string(s.streams) + "_lanes" + std::to_string(s.lanes);
}

class WireModes : public ::testing::TestWithParam<Shape> {};

// Allreduce (a consumer reduces records as they are verified), allgather (stored in place) and
// alltoall, small and spanning several records per stream; every element checked.
Status RunCollectives(RankContext& ctx, Communicator& comm, int salt) {
  const int n = comm.size();
  const int r = ctx.rank();
  for (size_t count : {size_t{7}, size_t{300000}}) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((r + 1) * (salt + 1) + i % 7);
    AllreduceOptions a;
    a.input = a.output = v.data();
    a.count = count;
    KV_RETURN_IF_ERROR(Allreduce(comm, a));
    const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      const float want = ranks_sum * static_cast<float>(salt + 1) + static_cast<float>(n * (i % 7));
      if (!ctx.Check(v[i] == want, "allreduce[" + std::to_string(i) + "]")) break;
    }
    std::vector<int32_t> mine(count), all(count * n);
    for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(r * 1000003 + i + salt);
    std::vector<size_t> counts(n, count);
    AllgatherOptions g;
    g.input = mine.data();
    g.output = all.data();
    g.counts = counts;
    g.type = DataType::kInt32;
    KV_RETURN_IF_ERROR(Allgather(comm, g));
    for (size_t i = 0; i < all.size(); ++i) {
      const int32_t want = static_cast<int32_t>((i / count) * 1000003 + i % count + salt);
      if (!ctx.Check(all[i] == want, "allgather[" + std::to_string(i) + "]")) break;
    }
    std::vector<int32_t> in(count * n), out(count * n);
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>(r * 7919 + (i / count) * 31 + i % count + salt);
    }
    AlltoallOptions t;
    t.input = in.data();
    t.output = out.data();
    t.send_counts = counts;
    t.recv_counts = counts;
    t.type = DataType::kInt32;
    KV_RETURN_IF_ERROR(Alltoall(comm, t));
    for (size_t i = 0; i < out.size(); ++i) {
      const size_t from = i / count;
      const int32_t want = static_cast<int32_t>(from * 7919 + r * 31 + i % count + salt);
      if (!ctx.Check(out[i] == want, "alltoall[" + std::to_string(i) + "]")) break;
    }
  }
  return OkStatus();
}

TEST_P(WireModes, CollectivesAreExact) {
  const Shape shape = GetParam();
  WorldSpec spec;
  spec.size = shape.size;
  spec.transport = TransportKind::kTcp;
  spec.customize = [shape](WorldOptions& o) {
    o.wire_security = shape.mode;
    o.tcp_streams = shape.streams;
    o.tcp_stripe_min = 64 << 10;
    o.collective_lanes = shape.lanes;
  };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    std::vector<std::unique_ptr<Communicator>> lanes = ctx.comm().TakeLanes();
    std::vector<Communicator*> comms = {&ctx.comm()};
    for (auto& l : lanes) comms.push_back(l.get());
    std::vector<Status> results(comms.size());
    std::vector<RankContext> contexts;
    for (size_t c = 0; c < comms.size(); ++c) contexts.emplace_back(ctx.rank(), comms[c]);
    std::vector<std::thread> threads;
    for (size_t c = 0; c < comms.size(); ++c) {
      threads.emplace_back([&, c] {
        results[c] = RunCollectives(contexts[c], *comms[c], static_cast<int>(c));
      });
    }
    for (auto& t : threads) t.join();
    for (size_t c = 0; c < comms.size(); ++c) {
      for (const std::string& f : contexts[c].failures()) {
        ctx.Fail("communicator " + std::to_string(c) + ": " + f);
      }
      KV_RETURN_IF_ERROR(results[c]);
    }
    return OkStatus();
  }));
}

std::vector<Shape> AllShapes() {
  std::vector<Shape> shapes;
  for (WireSecurity m : {WireSecurity::kNone, WireSecurity::kIntegrity, WireSecurity::kEncrypt}) {
    for (int size : {2, 3}) {
      shapes.push_back({m, size, 1, 1});
      shapes.push_back({m, size, 4, 1});
      shapes.push_back({m, size, 2, 2});
    }
  }
  return shapes;
}

INSTANTIATE_TEST_SUITE_P(Tcp, WireModes, ::testing::ValuesIn(AllShapes()), ShapeName);

// ---- A man in the middle ----

// Forwards every connection made to its port on to `target`, one thread per direction. On the
// connection accepted `conn`-th, the dialer-to-acceptor direction can be tampered with once
// armed: flip one byte, capture a stretch, or replay a captured stretch in place of as many new
// bytes. Everything forwarded that way is kept for inspection.
class Relay {
 public:
  enum class Action { kNone, kFlip, kCapture, kReplay };

  Relay() : listen_fd_(ListenLoopback(&port_)) {}
  ~Relay() {
    stop_.store(true);
    ::shutdown(listen_fd_, SHUT_RDWR);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : pumps_) t.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  void Start(PeerAddress target) {
    target_ = std::move(target);
    acceptor_ = std::thread([this] { Accept(); });
  }
  // On connection `conn`, after `skip` more bytes dialer-to-acceptor: `action` over `len` bytes.
  void Arm(int conn, Action action, size_t skip, size_t len) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = {conn, action, skip, len};
  }
  // Sends `bytes` to the acceptor on connection `conn` now, as if the dialer had.
  bool Inject(int conn, const std::string& bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn >= static_cast<int>(acceptor_fds_.size())) return false;
    return WriteFull(acceptor_fds_[conn], bytes.data(), bytes.size(),
                     Deadline::After(milliseconds(1000)), "relay")
        .ok();
  }
  std::string Forwarded() {  // every dialer-to-acceptor byte of every connection
    std::lock_guard<std::mutex> lock(mu_);
    return forwarded_;
  }

 private:
  struct Armed {
    int conn = -1;
    Action action = Action::kNone;
    size_t skip = 0;
    size_t len = 0;
  };

  void Accept() {
    for (int conn = 0; !stop_.load(); ++conn) {
      auto in = AcceptTcp(listen_fd_, Deadline::After(milliseconds(100)));
      if (!in.ok()) {
        --conn;
        continue;
      }
      auto out = ConnectTcp(target_, Deadline::After(milliseconds(5000)));
      if (!out.ok()) return;
      const int a = in->release(), b = out->release();
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(a);
      fds_.push_back(b);
      acceptor_fds_.push_back(b);
      pumps_.emplace_back([this, a, b, conn] { Pump(a, b, conn, true); });
      pumps_.emplace_back([this, a, b] { Pump(b, a, -1, false); });
    }
  }

  // Applies the armed action to `buf` (bytes about to be forwarded on `conn`).
  void Tamper(int conn, std::string& buf) {
    std::lock_guard<std::mutex> lock(mu_);
    if (armed_.conn != conn || armed_.action == Action::kNone) return;
    size_t at = 0;
    while (at < buf.size() && armed_.action != Action::kNone) {
      if (armed_.skip > 0) {
        const size_t n = std::min(armed_.skip, buf.size() - at);
        armed_.skip -= n;
        at += n;
        continue;
      }
      const size_t n = std::min(armed_.len, buf.size() - at);
      if (armed_.action == Action::kFlip) buf[at] ^= 0x01;
      if (armed_.action == Action::kCapture) captured_.append(buf, at, n);
      if (armed_.action == Action::kReplay) {
        buf.replace(at, n, captured_, replayed_, n);
        replayed_ += n;
      }
      armed_.len = armed_.action == Action::kFlip ? 0 : armed_.len - n;
      at += armed_.action == Action::kFlip ? 1 : n;
      if (armed_.len == 0) armed_.action = Action::kNone;
    }
  }

  void Pump(int from, int to, int conn, bool dialer_side) {
    std::string buf(64 << 10, '\0');
    while (!stop_.load()) {
      pollfd p{from, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(from, buf.data(), 64 << 10, 0);
      if (n <= 0) break;
      std::string chunk(buf.data(), static_cast<size_t>(n));
      if (dialer_side) {
        Tamper(conn, chunk);
        std::lock_guard<std::mutex> lock(mu_);
        forwarded_ += chunk;
      }
      if (!WriteFull(to, chunk.data(), chunk.size(), Deadline::After(milliseconds(5000)), "relay")
               .ok()) {
        break;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  uint16_t port_ = 0;
  int listen_fd_;
  PeerAddress target_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  Armed armed_;
  std::string captured_, forwarded_;
  size_t replayed_ = 0;
  std::vector<int> fds_;
  std::vector<int> acceptor_fds_;  // by connection: the relay's end towards the acceptor
  std::vector<std::thread> pumps_;
  std::thread acceptor_;
};

constexpr size_t kHandshakeBytes = 64 + 32;  // the dialer's Hello and proof (handshake.cc)

// Two ranks, one stream each way; rank 1 reaches rank 0 through `relay` (its connections are
// accepted in order: data stream 0 is connection 0, the control connection 1).
WorldSpec RelayedWorld(WireSecurity mode, Relay& relay) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  spec.op_timeout = milliseconds(10000);
  spec.customize = [mode, &relay](WorldOptions& o) {
    o.wire_security = mode;
    o.tcp_streams = 1;
    if (o.rank == 1) {
      relay.Start(o.peers[0]);
      o.peers[0] = PeerAddress{"127.0.0.1", relay.port()};
    }
  };
  return spec;
}

Status Send(Communicator& comm, int peer, const std::vector<std::byte>& data) {
  return comm.transport().Exchange(SendSpec{peer, data.data(), data.size()}, RecvSpec{},
                                   Deadline::After(milliseconds(10000)));
}

Status Receive(Communicator& comm, int peer, std::vector<std::byte>& data, milliseconds limit) {
  RecvSpec r;
  r.peer = peer;
  r.len = data.size();
  r.dest = data.data();
  return comm.transport().Exchange(SendSpec{}, r, Deadline::After(limit));
}

class Tampering : public ::testing::TestWithParam<WireSecurity> {};

// `tamper` arms the relay once rank 0 holds a first message, before rank 1 sends a second:
// rank 0's receive of the second fails naming rank 1, rank 1 learns of it, both within a second.
void ExpectSecondMessageRefused(WireSecurity mode, const std::function<void(Relay&)>& tamper) {
  Relay relay;
  std::latch armed(1);
  std::vector<std::string> errors(2);
  const Clock::time_point start = Clock::now();
  ThreadWorld world = RunThreadRanks(RelayedWorld(mode, relay), [&](RankContext& ctx) -> Status {
    std::vector<std::byte> msg(4096, std::byte{0x5a});
    if (ctx.rank() == 1) {
      KV_RETURN_IF_ERROR(Send(ctx.comm(), 0, msg));
      armed.wait();
      Status s = Send(ctx.comm(), 0, msg);  // fits the socket buffers: it completes
      // The next op waits on rank 0, which gave up: its abort must end this one.
      if (s.ok()) s = Receive(ctx.comm(), 0, msg, milliseconds(10000));
      errors[1] = s.message();
      return OkStatus();
    }
    KV_RETURN_IF_ERROR(Receive(ctx.comm(), 1, msg, milliseconds(10000)));
    ctx.Check(msg[100] == std::byte{0x5a}, "first message intact");
    tamper(relay);
    armed.count_down();
    errors[0] = Receive(ctx.comm(), 1, msg, milliseconds(10000)).message();
    return OkStatus();
  });
  ExpectAllRanksOk(world);
  const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  const std::string sender = "rank 1 (" + world.peers[1].ToString() + ")";
  EXPECT_TRUE(Contains(errors[0], sender + ": message authentication failed on connection 1"))
      << errors[0];
  EXPECT_TRUE(Contains(errors[1], "gave up") &&
              Contains(errors[1], "message authentication failed on connection 1"))
      << errors[1];
  EXPECT_LT(elapsed.count(), 8000) << "a tampered record must fail at once, not at a deadline";
}

TEST_P(Tampering, AFlippedByteFailsTheReceiverNamingTheSender) {
  ExpectSecondMessageRefused(GetParam(), [](Relay& relay) {
    relay.Arm(/*conn=*/0, Relay::Action::kFlip, /*skip=*/1000, 1);
  });
}

TEST_P(Tampering, AFlippedTagFailsToo) {
  ExpectSecondMessageRefused(GetParam(), [](Relay& relay) {
    relay.Arm(0, Relay::Action::kFlip, /*skip=*/4096 + 3, 1);
  });
}

TEST_P(Tampering, AReplayedRecordFails) {
  Relay relay;
  std::latch captured(1), replaying(1);
  std::vector<std::string> errors(2);
  ThreadWorld world = RunThreadRanks(RelayedWorld(GetParam(), relay), [&](RankContext& ctx) {
    std::vector<std::byte> msg(4096);
    if (ctx.rank() == 1) {
      captured.wait();
      for (int i = 0; i < 2; ++i) {
        std::fill(msg.begin(), msg.end(), std::byte(i + 1));
        if (i == 1) replaying.wait();
        Status s = Send(ctx.comm(), 0, msg);
        if (!s.ok()) return s;
      }
      errors[1] = Receive(ctx.comm(), 0, msg, milliseconds(10000)).message();
      return OkStatus();
    }
    // The first message's record (payload and tag) is recorded, then sent in the second's place.
    relay.Arm(0, Relay::Action::kCapture, 0, 4096 + RecordKey::kTagBytes);
    captured.count_down();
    KV_RETURN_IF_ERROR(Receive(ctx.comm(), 1, msg, milliseconds(10000)));
    ctx.Check(msg[0] == std::byte{1}, "first message intact");
    relay.Arm(0, Relay::Action::kReplay, 0, 4096 + RecordKey::kTagBytes);
    replaying.count_down();
    errors[0] = Receive(ctx.comm(), 1, msg, milliseconds(10000)).message();
    return OkStatus();
  });
  ExpectAllRanksOk(world);
  const std::string sender = "rank 1 (" + world.peers[1].ToString() + ")";
  EXPECT_TRUE(
      Contains(errors[0], sender + ": message authentication failed on connection 1 (record 1)"))
      << errors[0];
  EXPECT_TRUE(Contains(errors[1], "message authentication failed")) << errors[1];
}

// An abort frame injected on the control connection (what an attacker would send to stop the
// job with a reason of its choosing) fails its tag: the forged reason is never reported.
TEST_P(Tampering, AForgedAbortIsNotBelieved) {
  Relay relay;
  std::latch done(1);
  std::string error;
  const Clock::time_point start = Clock::now();
  ThreadWorld world = RunThreadRanks(RelayedWorld(GetParam(), relay), [&](RankContext& ctx) {
    if (ctx.rank() == 1) {
      done.wait();  // stays connected (and silent) while rank 0 waits on it
      return OkStatus();
    }
    std::string frame(12, '\0');
    const uint32_t header[3] = {0x5443564b, 2, 6};  // "KVCT", abort, 6 bytes of reason
    std::memcpy(frame.data(), header, sizeof header);
    frame += "forged";
    frame += std::string(RecordKey::kTagBytes, '\0');
    ctx.Check(relay.Inject(/*conn=*/1, frame), "injected");
    std::vector<std::byte> msg(4096);
    error = Receive(ctx.comm(), 1, msg, milliseconds(5000)).message();
    done.count_down();
    return OkStatus();
  });
  ExpectAllRanksOk(world);
  EXPECT_FALSE(Contains(error, "forged")) << error;
  EXPECT_TRUE(Contains(error, "rank 1 (" + world.peers[1].ToString() +
                                  "): message authentication failed on connection 2"))
      << error;
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(), 4000);
}

INSTANTIATE_TEST_SUITE_P(Sealed, Tampering,
                         ::testing::Values(WireSecurity::kIntegrity, WireSecurity::kEncrypt),
                         [](const auto& info) {
                           return std::string(WireSecurityName(info.param));
                         });

// Encrypt: a tensor's bytes never cross the wire as they are (integrity: they do, which shows
// that the relay sees them).
TEST(WireSecurity, EncryptLeavesNoPlaintextOnTheWire) {
  const std::string pattern = "KOROVOD-KNOWN-TENSOR-0123456789ab";
  for (WireSecurity mode : {WireSecurity::kIntegrity, WireSecurity::kEncrypt}) {
    Relay relay;
    ThreadWorld world = RunThreadRanks(RelayedWorld(mode, relay), [&](RankContext& ctx) {
      std::vector<std::byte> msg(1 << 20);
      for (size_t i = 0; i < msg.size(); ++i) msg[i] = std::byte(pattern[i % pattern.size()]);
      if (ctx.rank() == 1) return Send(ctx.comm(), 0, msg);
      std::vector<std::byte> got(msg.size());
      KV_RETURN_IF_ERROR(Receive(ctx.comm(), 1, got, milliseconds(10000)));
      ctx.Check(got == msg, "received intact");
      return OkStatus();
    });
    ExpectAllRanksOk(world);
    const std::string wire = relay.Forwarded();
    EXPECT_GT(wire.size(), size_t{1} << 20);
    EXPECT_EQ(Contains(wire, pattern.substr(0, 16)), mode == WireSecurity::kIntegrity)
        << WireSecurityName(mode);
  }
}

// ---- Agreement ----

TEST(WireSecurity, RanksWithDifferentModesFailNamingBoth) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  spec.connect_timeout = milliseconds(10000);
  spec.customize = [](WorldOptions& o) {
    o.wire_security = o.rank == 0 ? WireSecurity::kNone : WireSecurity::kIntegrity;
  };
  ThreadWorld world = RunThreadRanks(spec, [](RankContext&) { return OkStatus(); });
  for (const RankReport& r : world.reports) {
    EXPECT_FALSE(r.created) << "rank " << r.rank;
    const std::string& m = r.status.message();
    EXPECT_TRUE(Contains(m, "KOROVOD_WIRE_SECURITY=") && Contains(m, "none") &&
                Contains(m, "integrity"))
        << "rank " << r.rank << ": " << m;
    EXPECT_LT(std::chrono::duration_cast<milliseconds>(r.elapsed).count(), 5000);
  }
}

TEST(WireSecurity, ASealedModeNeedsAJobKey) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  spec.job_key = "";
  spec.connect_timeout = milliseconds(3000);
  spec.customize = [](WorldOptions& o) { o.wire_security = WireSecurity::kEncrypt; };
  ThreadWorld world = RunThreadRanks(spec, [](RankContext&) { return OkStatus(); });
  for (const RankReport& r : world.reports) {
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
    EXPECT_TRUE(Contains(r.status.message(), "needs a job key")) << r.status.ToString();
  }
}

TEST(WireSecurity, ModesParseByName) {
  for (WireSecurity m : {WireSecurity::kNone, WireSecurity::kIntegrity, WireSecurity::kEncrypt}) {
    EXPECT_EQ(ParseWireSecurity(WireSecurityName(m)), m);
  }
  EXPECT_FALSE(ParseWireSecurity("tls").has_value());
}

}  // namespace
}  // namespace korovod::testing
