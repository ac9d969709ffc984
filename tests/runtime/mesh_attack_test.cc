// The mesh acceptor under attack (issue 30): a process without the job key that claims a rank,
// stalls, sends garbage or floods cannot fail a forming world nor take a genuine peer's slot; the
// real peer still joins. If the real peer never comes, the timeout names the impostor's address.
// A forged answer cannot make a dialer believe it belongs to another membership epoch.
#include <gtest/gtest.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "runtime/collectives/collectives.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/peer_mesh.h"
#include "runtime/transport/socket.h"
#include "runtime/world/communicator.h"
#include "tests/runtime/rank_harness.h"

namespace korovod {
namespace {

using std::chrono::milliseconds;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

constexpr size_t kChallengeBytes = 4 + 32 + 32;  // epoch, nonce, proof (handshake.cc)

Hello ImpostorHello(int from, int to, int world, int32_t stream) {
  Hello h{};
  std::memcpy(h.magic, "KVRD", 4);
  h.version = kHandshakeProtocolVersion;
  h.from = from;
  h.to = to;
  h.stream = stream;
  h.world = world;
  h.epoch = 0;
  RAND_bytes(h.nonce, sizeof h.nonce);
  return h;
}

// What the attacker does: a Hello claiming rank 1, then 32 zero bytes as its proof.
// Returns the local address it came from ("127.0.0.1:port") and the verdict byte it read.
std::pair<std::string, int> ClaimRankWithoutTheKey(const PeerAddress& target, int from,
                                                   int world) {
  const Deadline d = Deadline::After(milliseconds(5000));
  auto fd = ConnectTcp(target, d);
  EXPECT_TRUE(fd.ok()) << fd.status().ToString();
  if (!fd.ok()) return {"", -1};
  const Hello h = ImpostorHello(from, 0, world, 0);
  EXPECT_TRUE(WriteFull(fd->get(), &h, sizeof h, d, "rank 0").ok());
  unsigned char challenge[kChallengeBytes];
  EXPECT_TRUE(ReadFull(fd->get(), challenge, sizeof challenge, d, "rank 0").ok());
  const unsigned char zeros[32] = {};
  EXPECT_TRUE(WriteFull(fd->get(), zeros, sizeof zeros, d, "rank 0").ok());
  char verdict = 2;
  if (!ReadFull(fd->get(), &verdict, 1, d, "rank 0").ok()) verdict = -1;
  auto port = LocalPort(fd->get());
  return {"127.0.0.1:" + std::to_string(port.ok() ? *port : 0), verdict};
}

WorldOptions Options(const std::vector<PeerAddress>& peers, int rank, int listen_fd,
                     milliseconds connect_timeout) {
  WorldOptions o;
  o.rank = rank;
  o.peers = peers;
  o.listen_fd = listen_fd;
  o.job_key = "the-job-key-of-this-world-0123456789";
  o.transport = TransportKind::kTcp;
  o.connect_timeout = connect_timeout;
  return o;
}

void ExpectAllreduceWorks(Communicator& c0, Communicator& c1) {
  std::vector<float> a = {1, 2}, b = {10, 20};
  std::jthread t0([&] {
    AllreduceOptions o;
    o.input = o.output = a.data();
    o.count = 2;
    EXPECT_TRUE(Allreduce(c0, o).ok());
  });
  AllreduceOptions o;
  o.input = o.output = b.data();
  o.count = 2;
  EXPECT_TRUE(Allreduce(c1, o).ok());
  t0.join();
  EXPECT_EQ(a, (std::vector<float>{11, 22}));
  EXPECT_EQ(b, a);
}

// Issue 30, case 1: the impostor's wrong proof is refused, rank 0 keeps waiting, and the real
// rank 1, arriving 0.3 s later, forms the world. Stalled and half Hellos, garbage and a flood of
// connections at the same time hold nothing up: with handshakes one after another, each stalled
// client alone would cost its 5 s handshake deadline, longer than this world's connect timeout.
TEST(MeshAttack, AnImpostorStallsAndAFloodDoNotStopTheRealPeer) {
  uint16_t port0 = 0, port1 = 0;
  const int fd0 = testing::ListenLoopback(&port0);
  const int fd1 = testing::ListenLoopback(&port1);
  const std::vector<PeerAddress> peers = {{"127.0.0.1", port0}, {"127.0.0.1", port1}};
  StatusOr<std::unique_ptr<Communicator>> c0 = Internal("not run"), c1 = Internal("not run");
  std::jthread rank0([&] { c0 = Communicator::Create(Options(peers, 0, fd0, milliseconds(4000))); });

  const auto [impostor, verdict] = ClaimRankWithoutTheKey(peers[0], 1, 2);
  EXPECT_EQ(verdict, 0) << "the impostor's proof was not refused";
  std::vector<Fd> stalled;
  const Deadline d = Deadline::After(milliseconds(5000));
  for (int i = 0; i < 6; ++i) {  // connected, silent
    auto fd = ConnectTcp(peers[0], d);
    ASSERT_TRUE(fd.ok());
    stalled.push_back(std::move(fd).value());
  }
  for (int i = 0; i < 6; ++i) {  // half a Hello, then silence
    auto fd = ConnectTcp(peers[0], d);
    ASSERT_TRUE(fd.ok());
    const Hello h = ImpostorHello(1, 0, 2, 0);
    ASSERT_TRUE(WriteFull(fd->get(), &h, sizeof h / 2, d, "rank 0").ok());
    stalled.push_back(std::move(fd).value());
  }
  for (int i = 0; i < 100; ++i) {  // a flood: connect, send garbage, close
    auto fd = ConnectTcp(peers[0], d);
    ASSERT_TRUE(fd.ok());
    const char junk[80] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)WriteFull(fd->get(), junk, sizeof junk, d, "rank 0");
  }
  std::this_thread::sleep_for(milliseconds(300));
  std::jthread rank1([&] { c1 = Communicator::Create(Options(peers, 1, fd1, milliseconds(4000))); });
  rank0.join();
  rank1.join();
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  ExpectAllreduceWorks(**c0, **c1);
  ::close(fd0);
  ::close(fd1);
}

// The real peer never comes: the timeout names the impostor's address and what it did, and,
// since the missing rank's claim failed the key check, says the keys may differ.
TEST(MeshAttack, TheTimeoutNamesTheImpostorWhenTheRealPeerNeverComes) {
  uint16_t port0 = 0, port1 = 0;
  const int fd0 = testing::ListenLoopback(&port0);
  const int fd1 = testing::ListenLoopback(&port1);
  const std::vector<PeerAddress> peers = {{"127.0.0.1", port0}, {"127.0.0.1", port1}};
  StatusOr<std::unique_ptr<Communicator>> c0 = Internal("not run");
  std::jthread rank0([&] { c0 = Communicator::Create(Options(peers, 0, fd0, milliseconds(1500))); });
  const auto [impostor, verdict] = ClaimRankWithoutTheKey(peers[0], 1, 2);
  rank0.join();
  ASSERT_FALSE(c0.ok());
  const std::string m = c0.status().message();
  EXPECT_EQ(c0.status().code(), StatusCode::kPermissionDenied) << m;
  EXPECT_TRUE(Contains(m, "waiting for rank 1 (127.0.0.1:" + std::to_string(port1) + ")")) << m;
  EXPECT_TRUE(Contains(m, impostor + " (claimed rank 1 of a world of 2 (epoch 0): presented a "
                                     "wrong job key)"))
      << m;
  // Named once: no layer repeats the rank's prefix.
  EXPECT_EQ(m.find("rank 0"), m.rfind("rank 0 (127.0.0.1:" + std::to_string(port0) + ")")) << m;
  ::close(fd0);
  ::close(fd1);
}

// Someone answering at a peer's address without the key cannot make the dialer believe that the
// peer belongs to another membership epoch: the epoch is inside the acceptor's proof.
TEST(MeshAttack, AForgedEpochInTheAnswerIsNotBelieved) {
  uint16_t port = 0;
  const int listen_fd = testing::ListenLoopback(&port);
  std::jthread fake([&] {
    auto fd = AcceptTcp(listen_fd, Deadline::After(milliseconds(5000)));
    if (!fd.ok()) return;
    const Deadline d = Deadline::After(milliseconds(5000));
    Hello h{};
    if (!ReadFull(fd->get(), &h, sizeof h, d, "dialer").ok()) return;
    unsigned char challenge[kChallengeBytes] = {};
    const uint32_t epoch = 9;
    std::memcpy(challenge, &epoch, 4);
    (void)WriteFull(fd->get(), challenge, sizeof challenge, d, "dialer");
    char rest[64];
    (void)ReadFull(fd->get(), rest, 32, d, "dialer");
  });
  const Deadline d = Deadline::After(milliseconds(5000));
  Status s = PeerMesh::Probe({"127.0.0.1", port}, "the-job-key-of-this-world-0123456789", 0, 1, 0,
                             2, d, d);
  fake.join();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "failed to prove the job key")) << s.ToString();
  EXPECT_FALSE(Contains(s.message(), "epoch 9")) << s.ToString();
  ::close(listen_fd);
}

}  // namespace
}  // namespace korovod
