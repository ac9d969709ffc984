// Rendezvous on loopback: ranks as threads register with rank 0 and all receive the same table;
// a rank with another job key is refused while the real one still gets in; an absent coordinator
// or an absent rank is an error within the timeout that names it.
#include "runtime/world/rendezvous.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "runtime/transport/socket.h"
#include "runtime/world/world_table.h"
#include "tests/runtime/rank_harness.h"

namespace korovod {
namespace {

using std::chrono::milliseconds;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

RankEntry Self(int rank, const std::string& node) {
  RankEntry e;
  e.host_name = "host" + std::to_string(rank);
  e.node = node;
  e.port = static_cast<uint16_t>(20000 + rank);
  e.addresses = {{"lo", "127.0.0.1"}, {"eth0", "10.77.0." + std::to_string(rank + 1)}};
  return e;
}

struct Coordinator {
  Coordinator() { fd = testing::ListenLoopback(&port); }
  ~Coordinator() { ::close(fd); }
  int fd = -1;
  uint16_t port = 0;
};

RendezvousOptions Options(const Coordinator& c, int rank, int size, const std::string& node) {
  RendezvousOptions o;
  o.rank = rank;
  o.size = size;
  o.coordinator = {"127.0.0.1", c.port};
  o.coordinator_listen_fd = rank == 0 ? c.fd : -1;
  o.job_key = "rendezvous-test-key";
  o.self = Self(rank, node);
  o.timeout = milliseconds(15000);
  return o;
}

// Runs Rendezvous for every rank of `opts` in its own thread.
std::vector<StatusOr<std::vector<RankEntry>>> RunAll(const std::vector<RendezvousOptions>& opts) {
  std::vector<StatusOr<std::vector<RankEntry>>> out(opts.size(), Internal("not run"));
  {
    std::vector<std::jthread> threads;
    for (size_t r = 0; r < opts.size(); ++r) {
      threads.emplace_back([&, r] { out[r] = Rendezvous(opts[r]); });
    }
  }
  return out;
}

TEST(Rendezvous, FourRanksOnDistinctNodesGetTheSameTableWithoutLoopback) {
  Coordinator c;
  std::vector<RendezvousOptions> opts;
  for (int r = 0; r < 4; ++r) opts.push_back(Options(c, r, 4, "node" + std::to_string(r)));
  auto results = RunAll(opts);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    EXPECT_EQ(FormatWorldTable(*results[r]), FormatWorldTable(*results[0])) << "rank " << r;
  }
  const std::vector<RankEntry>& t = *results[2];
  ASSERT_EQ(t.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(t[r].host_name, "host" + std::to_string(r));
    EXPECT_EQ(t[r].port, 20000 + r);
    ASSERT_EQ(t[r].addresses.size(), 1u) << "loopback must be dropped across nodes";
    EXPECT_EQ(t[r].addresses[0].iface, "eth0");
  }
}

TEST(Rendezvous, ThreeRanksOnOneNodeKeepLoopbackFirst) {
  Coordinator c;
  std::vector<RendezvousOptions> opts;
  for (int r = 0; r < 3; ++r) opts.push_back(Options(c, r, 3, "same-node"));
  std::swap(opts[0].self.addresses[0], opts[0].self.addresses[1]);  // rank 0 lists lo last
  auto results = RunAll(opts);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    for (const RankEntry& e : *results[r]) {
      ASSERT_EQ(e.addresses.size(), 2u);
      EXPECT_EQ(e.addresses[0].iface, "lo");
    }
  }
}

TEST(Rendezvous, AWrongJobKeyIsRefusedAndTheRealRankStillJoins) {
  Coordinator c;
  std::vector<RendezvousOptions> opts;
  for (int r = 0; r < 3; ++r) opts.push_back(Options(c, r, 3, "n" + std::to_string(r)));
  std::vector<StatusOr<std::vector<RankEntry>>> out(2, Internal("not run"));
  std::jthread rank0([&] { out[0] = Rendezvous(opts[0]); });
  std::jthread rank1([&] { out[1] = Rendezvous(opts[1]); });

  RendezvousOptions impostor = opts[2];
  impostor.job_key = "another-job";
  auto refused = Rendezvous(impostor);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_TRUE(Contains(refused.status().message(), "job key")) << refused.status().ToString();
  EXPECT_TRUE(Contains(refused.status().message(), "rank 2 (host host2)"))
      << refused.status().ToString();

  auto real = Rendezvous(opts[2]);
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  rank0.join();
  rank1.join();
  ASSERT_TRUE(out[0].ok()) << out[0].status().ToString();
  ASSERT_TRUE(out[1].ok()) << out[1].status().ToString();
  EXPECT_EQ(FormatWorldTable(*out[1]), FormatWorldTable(*real));
}

// Silent and half-Hello clients connected to the coordinator hold nothing up: the real ranks
// register within a 4 s timeout (one after another, each would cost its 5 s handshake deadline).
TEST(Rendezvous, StalledClientsDoNotHoldTheCoordinator) {
  Coordinator c;
  std::vector<Fd> stalled;
  const Deadline d = Deadline::After(milliseconds(5000));
  for (int i = 0; i < 8; ++i) {
    auto fd = ConnectTcp({"127.0.0.1", c.port}, d);
    ASSERT_TRUE(fd.ok());
    if (i % 2 == 1) (void)WriteFull(fd->get(), "KVRD", 4, d, "coordinator");
    stalled.push_back(std::move(fd).value());
  }
  std::vector<RendezvousOptions> opts;
  for (int r = 0; r < 3; ++r) {
    opts.push_back(Options(c, r, 3, "n" + std::to_string(r)));
    opts.back().timeout = milliseconds(4000);
  }
  auto out = RunAll(opts);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(out[r].ok()) << out[r].status().ToString();
}

TEST(Rendezvous, AnAbsentCoordinatorIsAnErrorWithinTheTimeoutNamingIt) {
  const uint16_t closed = testing::UnusedLoopbackPort();
  RendezvousOptions o;
  o.rank = 1;
  o.size = 2;
  o.coordinator = {"127.0.0.1", closed};
  o.job_key = "k";
  o.self = Self(1, "n1");
  o.timeout = milliseconds(1500);
  const auto t0 = Clock::now();
  auto r = Rendezvous(o);
  const auto took = Clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  const std::string& m = r.status().message();
  EXPECT_TRUE(Contains(m, "rank 1 (host host1)")) << m;
  EXPECT_TRUE(Contains(m, "127.0.0.1:" + std::to_string(closed))) << m;
  EXPECT_TRUE(Contains(m, "1500 ms")) << m;
  EXPECT_LT(took, std::chrono::seconds(30));  // bounded by the deadline, not hanging
}

TEST(Rendezvous, TheCoordinatorNamesRanksThatNeverRegistered) {
  Coordinator c;
  std::vector<RendezvousOptions> opts;
  for (int r = 0; r < 3; ++r) opts.push_back(Options(c, r, 3, "n" + std::to_string(r)));
  for (auto& o : opts) o.timeout = milliseconds(1500);
  opts.pop_back();  // rank 2 never comes
  auto results = RunAll(opts);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_EQ(results[r].status().code(), StatusCode::kDeadlineExceeded);
  }
  const std::string& m0 = results[0].status().message();
  EXPECT_TRUE(Contains(m0, "rank 2 did not register")) << m0;
  EXPECT_TRUE(Contains(m0, "registered: rank 0 (host host0), rank 1 (host host1)")) << m0;
  EXPECT_TRUE(Contains(results[1].status().message(), "registered with the rendezvous"))
      << results[1].status().ToString();
}

TEST(Rendezvous, RefusesARankOutsideTheWorld) {
  Coordinator c;
  RendezvousOptions o = Options(c, 3, 3, "n");
  EXPECT_EQ(Rendezvous(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace korovod
