// PeerMesh's control connection (a peer's goodbye or abort with its reason): a peer that closes
// after part of a message is dead, named, at the first event (found by peer_mesh_control_fuzzer:
// the part was read as "the rest is in flight" at every wake-up, so the death was never seen);
// a part with the peer still connected is still in flight; whole messages read as before.
#include "runtime/transport/peer_mesh.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

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

}  // namespace
}  // namespace korovod
