// PeerMesh's control connection (a peer's goodbye or abort with its reason): a peer that closes
// after part of a message is dead, named, at the first event (found by peer_mesh_control_fuzzer:
// the part was read as "the rest is in flight" at every wake-up, so the death was never seen);
// a part with the peer still connected is still in flight; whole messages read as before. Pings
// are answered and pongs counted without ending the watch; ExplainTimeout (an op's deadline)
// names a peer that does not answer a ping, and takes a running peer's abort as the cause.
#include "runtime/transport/peer_mesh.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

namespace korovod {

struct PeerMeshFuzzAccess {  // the friend PeerMesh grants tests/fuzz; the same use here
  static void Adopt(PeerMesh& mesh, int peer, Fd fd) {
    mesh.conns_[peer][mesh.streams_] = std::move(fd);
    mesh.watched_[peer].store(true);
  }
};

namespace {

struct Header {
  uint32_t magic = 0x5443564b;  // "KVCT"
  uint32_t type;
  uint32_t len;
};

class PeerMeshControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    PeerMeshFuzzAccess::Adopt(mesh_, 1, Fd(sv[0]));
    peer_ = Fd(sv[1]);
  }
  void TearDown() override { mesh_.Abort(Aborted("test over")); }
  void Send(const std::string& bytes) {
    ASSERT_EQ(::write(peer_.get(), bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
  }
  static std::string Bytes(const Header& h) {
    return std::string(reinterpret_cast<const char*>(&h), sizeof h);
  }
  PeerMesh mesh_{0, {{"127.0.0.1", 1}, {"10.0.0.2", 5000}}, 1};
  Fd peer_;
};

TEST_F(PeerMeshControlTest, PartialHeaderThenCloseIsDeath) {
  Send(Bytes(Header{0x5443564b, 2, 100}).substr(0, 7));
  EXPECT_TRUE(mesh_.OnControlEvent(1).ok());  // still connected: the rest may come
  EXPECT_GE(mesh_.watch_fd(1), 0);
  peer_.Reset();
  const Status s = mesh_.OnControlEvent(1);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("rank 1 (10.0.0.2:5000) died"), std::string::npos) << s.message();
  EXPECT_LT(mesh_.watch_fd(1), 0);
}

TEST_F(PeerMeshControlTest, PartialReasonThenCloseIsDeath) {
  Send(Bytes(Header{0x5443564b, 2, 16}) + "abc");
  peer_.Reset();
  const Status s = mesh_.OnControlEvent(1);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_LT(mesh_.watch_fd(1), 0);
}

TEST_F(PeerMeshControlTest, WholeMessagesReadAsBefore) {
  Send(Bytes(Header{0x5443564b, 2, 3}) + "oom");
  const Status s = mesh_.OnControlEvent(1);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_NE(s.message().find("gave up: oom"), std::string::npos) << s.message();
  EXPECT_LT(mesh_.watch_fd(1), 0);
}

TEST_F(PeerMeshControlTest, PingIsAnsweredAndTheWatchGoesOn) {
  Send(Bytes(Header{0x5443564b, 3, 0}));
  EXPECT_TRUE(mesh_.OnControlEvent(1).ok());
  EXPECT_GE(mesh_.watch_fd(1), 0);
  Header pong{};
  ASSERT_EQ(::read(peer_.get(), &pong, sizeof pong), static_cast<ssize_t>(sizeof pong));
  EXPECT_EQ(pong.type, 4u);
  EXPECT_EQ(pong.len, 0u);
}

TEST_F(PeerMeshControlTest, PongsAreCountedAndALastWordAfterThemIsRead) {
  Send(Bytes(Header{0x5443564b, 4, 0}) + Bytes(Header{0x5443564b, 4, 0}) +
       Bytes(Header{0x5443564b, 2, 3}) + "oom");
  const Status s = mesh_.OnControlEvent(1);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_EQ(mesh_.pongs(1), 2u);
  EXPECT_LT(mesh_.watch_fd(1), 0);
}

TEST_F(PeerMeshControlTest, ATimeoutNamesAPeerThatDoesNotAnswer) {
  const Status s = mesh_.ExplainTimeout({1}, DeadlineExceeded("timed out waiting for rank 1"));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1 (10.0.0.2:5000) did not answer a ping within 500 ms"),
            std::string::npos)
      << s.message();
}

TEST_F(PeerMeshControlTest, ATimeoutTakesTheCauseFromARunningPeersAbort) {
  // The peer runs (it answers the ping), waits for a third rank, and then gives up naming it.
  std::thread peer([this] {
    Header ping{};
    ASSERT_EQ(::read(peer_.get(), &ping, sizeof ping), static_cast<ssize_t>(sizeof ping));
    ASSERT_EQ(ping.type, 3u);
    Send(Bytes(Header{0x5443564b, 4, 0}));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string why = "timed out waiting for rank 2 (10.0.0.3:5000)";
    Send(Bytes(Header{0x5443564b, 2, static_cast<uint32_t>(why.size())}) + why);
  });
  const Status s = mesh_.ExplainTimeout({1}, DeadlineExceeded("timed out waiting for rank 1"));
  peer.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("rank 1 (10.0.0.2:5000) gave up: timed out waiting for rank 2"),
            std::string::npos)
      << s.message();
}

TEST_F(PeerMeshControlTest, ATimeoutSaysAPeerRunsWhenNoAbortFollows) {
  std::thread peer([this] {
    Header ping{};
    ASSERT_EQ(::read(peer_.get(), &ping, sizeof ping), static_cast<ssize_t>(sizeof ping));
    Send(Bytes(Header{0x5443564b, 4, 0}));
  });
  const Status s = mesh_.ExplainTimeout({1}, DeadlineExceeded("timed out waiting for rank 1"));
  peer.join();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1 (10.0.0.2:5000) answered, so it runs"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace korovod
