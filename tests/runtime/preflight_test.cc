// Preflight and the start-up path on loopback: a broken candidate address is skipped for a
// working one; an unreachable rank is an error naming its host, each address and interface tried
// and why; the mesh keeps accepting its real peers after probes that hang up or hold another key;
// the link probe and the summary line; world discovery by rendezvous and by world file.
#include "runtime/world/preflight.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "runtime/collectives/collectives.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/peer_mesh.h"
#include "runtime/transport/socket.h"
#include "runtime/world/communicator.h"
#include "runtime/world/host_identity.h"
#include "runtime/world/interfaces.h"
#include "runtime/world/link_probe.h"
#include "runtime/world/startup_summary.h"
#include "runtime/world/world_discovery.h"
#include "runtime/world/world_table.h"
#include "tests/runtime/rank_harness.h"

namespace korovod {
namespace {

using std::chrono::milliseconds;
using testing::RankContext;
using testing::ThreadWorld;
using testing::WorldSpec;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The harness binds every rank on 127.0.0.1, so 127.0.0.2 (also loopback) refuses at once: a
// "broken interface" that sends nothing off this host.
constexpr const char* kBrokenIp = "127.0.0.2";

std::vector<RankEntry> Table(const std::vector<PeerAddress>& peers, bool broken_first) {
  std::vector<RankEntry> t;
  for (size_t r = 0; r < peers.size(); ++r) {
    RankEntry e;
    e.host_name = "h" + std::to_string(r);
    e.node = "node" + std::to_string(r);  // distinct nodes: loopback is not assumed to work
    e.port = peers[r].port;
    if (broken_first) e.addresses.push_back({"bad0", kBrokenIp});
    e.addresses.push_back({"good1", "127.0.0.1"});
    t.push_back(std::move(e));
  }
  return t;
}

Status SumCheck(RankContext& ctx) {
  int32_t v[3] = {ctx.rank(), 1, 7};
  AllreduceOptions o;
  o.input = o.output = v;
  o.count = 3;
  o.type = DataType::kInt32;
  KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o));
  const int n = ctx.size();
  ctx.Check(v[0] == n * (n - 1) / 2 && v[1] == n && v[2] == 7 * n, "wrong allreduce result");
  return OkStatus();
}

TEST(Preflight, SkipsABrokenAddressAndTheMeshFormsOverTheWorkingOne) {
  WorldSpec spec;
  spec.size = 3;
  spec.customize = [](WorldOptions& o) {
    o.ranks = Table(o.peers, /*broken_first=*/true);
    o.probe_attempt_timeout = milliseconds(300);
  };
  auto interfaces = ListInterfaces();
  ASSERT_TRUE(interfaces.ok());
  std::vector<std::string> summaries(spec.size);
  const ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    Communicator& comm = ctx.comm();
    for (int p = 0; p < comm.size(); ++p) {
      ctx.Check(comm.peer(p).host == "127.0.0.1",
                "rank " + std::to_string(p) + " is named by " + comm.peer(p).ToString());
      if (p != ctx.rank()) {
        ctx.Check(comm.link_ends(p).remote_ip == "127.0.0.1", "link ends not recorded");
      }
    }
    KV_RETURN_IF_ERROR(SumCheck(ctx));
    KV_ASSIGN_OR_RETURN(auto rates,
                        ProbeRingLinks(comm, 1 << 20, Deadline::After(milliseconds(20000))));
    ctx.Check(rates.size() == 2, "expected two neighbour links");
    for (const LinkRate& r : rates) ctx.Check(r.bytes_per_second > 0, "no rate measured");
    KV_RETURN_IF_ERROR(SumCheck(ctx));  // the probe leaves the transport in step
    summaries[ctx.rank()] =
        FormatStartupSummary(comm, rates, *interfaces, "h" + std::to_string(ctx.rank()));
    return OkStatus();
  });
  testing::ExpectAllRanksOk(world);
  for (int r = 0; r < spec.size; ++r) {
    const std::string& s = summaries[r];
    std::printf("%s\n", s.c_str());
    EXPECT_TRUE(Contains(s, "korovod: rank " + std::to_string(r) + "/3 host h" + std::to_string(r) +
                                " iface lo addr 127.0.0.1:"))
        << s;
    EXPECT_TRUE(Contains(s, "transport tcp: next rank " + std::to_string((r + 1) % 3) + " (h"))
        << s;
    EXPECT_TRUE(Contains(s, "127.0.0.1 (good1)")) << s;
    EXPECT_TRUE(Contains(s, " GB/s, prev rank " + std::to_string((r + 2) % 3))) << s;
  }
}

TEST(Preflight, AnUnreachableRankNamesItsHostAndEveryAddressAndInterfaceTried) {
  WorldSpec spec;
  spec.size = 2;
  spec.connect_timeout = milliseconds(2000);
  spec.customize = [](WorldOptions& o) {
    o.ranks = Table(o.peers, /*broken_first=*/true);
    o.ranks[0].addresses.pop_back();  // rank 0 offers only the broken address
    o.ranks[0].addresses.push_back({"bad2", "127.0.0.3"});
    o.probe_attempt_timeout = milliseconds(300);
  };
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext&) -> Status {
    return Internal("Communicator::Create succeeded without a reachable rank 0");
  });
  const std::string port = std::to_string(world.peers[0].port);
  const Status& s1 = world.reports[1].status;
  std::printf("rank 1: %s\nrank 0: %s\n", s1.ToString().c_str(),
              world.reports[0].status.ToString().c_str());
  EXPECT_FALSE(world.reports[1].created);
  EXPECT_EQ(s1.code(), StatusCode::kUnavailable) << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "rank 1 (host h1) cannot reach rank 0 (host h0)"))
      << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), std::string(kBrokenIp) + ":" + port + " on bad0: "))
      << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "127.0.0.3:" + port + " on bad2: ")) << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "refused")) << s1.ToString();
  // Rank 0 waited for rank 1 until the deadline and says so.
  EXPECT_FALSE(world.reports[0].created);
  EXPECT_TRUE(Contains(world.reports[0].status.message(), "rank 1"))
      << world.reports[0].status.ToString();
}

TEST(Preflight, APeerWithAnotherJobKeyIsPermissionDenied) {
  WorldSpec spec;
  spec.size = 2;
  spec.connect_timeout = milliseconds(3000);
  spec.customize = [](WorldOptions& o) {
    o.ranks = Table(o.peers, /*broken_first=*/false);
    if (o.rank == 1) o.job_key = "another-job";
  };
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext&) -> Status {
    return Internal("Communicator::Create succeeded with a mismatched job key");
  });
  const Status& s1 = world.reports[1].status;
  EXPECT_EQ(s1.code(), StatusCode::kPermissionDenied) << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "rank 0 (host h0)")) << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "job key")) << s1.ToString();
  // Rank 0 is not failed by the probe itself; it times out naming the probe's key.
  EXPECT_TRUE(Contains(world.reports[0].status.message(), "preflight probe"))
      << world.reports[0].status.ToString();
}

// Elastic membership: a rank of an old epoch (the same job key) can never join a new epoch's
// world. The stale rank is refused naming both epochs; the new one keeps waiting for its real
// peer and names the refusal when it times out.
TEST(Preflight, ARankOfAnotherEpochIsRefused) {
  WorldSpec spec;
  spec.size = 2;
  spec.connect_timeout = milliseconds(3000);
  spec.customize = [](WorldOptions& o) {
    o.ranks = Table(o.peers, /*broken_first=*/false);
    o.epoch = o.rank == 0 ? 5 : 4;
  };
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext&) -> Status {
    return Internal("Communicator::Create succeeded across two membership epochs");
  });
  const Status& s1 = world.reports[1].status;
  EXPECT_EQ(s1.code(), StatusCode::kPermissionDenied) << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "belongs to membership epoch 5, this rank to epoch 4"))
      << s1.ToString();
  EXPECT_FALSE(world.reports[0].created);
  EXPECT_TRUE(Contains(world.reports[0].status.message(),
                       "claimed rank 1 of a world of 2 (epoch 4): belongs to another membership "
                       "epoch (this one is 5)"))
      << world.reports[0].status.ToString();
}

// Probes reach a rank's mesh acceptor while it waits for its real peers. One that hangs up
// halfway, one with another key and one that succeeds must not stop the real peer getting in.
TEST(Preflight, TheMeshKeepsAcceptingRealPeersAfterProbes) {
  uint16_t port0 = 0, port1 = 0;
  const int fd0 = testing::ListenLoopback(&port0);
  const int fd1 = testing::ListenLoopback(&port1);
  std::vector<PeerAddress> peers = {{"127.0.0.1", port0}, {"127.0.0.1", port1}};
  auto options = [&](int rank) {
    WorldOptions o;
    o.rank = rank;
    o.peers = peers;
    o.listen_fd = rank == 0 ? fd0 : fd1;
    o.job_key = "mesh-key";
    o.transport = TransportKind::kTcp;
    o.connect_timeout = milliseconds(15000);
    return o;
  };
  StatusOr<std::unique_ptr<Communicator>> c0 = Internal("not run"), c1 = Internal("not run");
  std::jthread rank0([&] { c0 = Communicator::Create(options(0)); });

  {  // A probe that sends its hello and hangs up before proving anything.
    auto raw = ConnectTcp(peers[0], Deadline::After(milliseconds(5000)));
    ASSERT_TRUE(raw.ok()) << raw.status().ToString();
    Hello h{};
    std::memcpy(h.magic, "KVRD", 4);
    h.version = 1;
    h.from = 1;
    h.to = 0;
    h.stream = kProbeStream;
    h.world = 2;
    ASSERT_TRUE(
        WriteFull(raw->get(), &h, sizeof h, Deadline::After(milliseconds(5000)), "r0").ok());
  }
  {  // Not a korovod connection at all.
    auto raw = ConnectTcp(peers[0], Deadline::After(milliseconds(5000)));
    ASSERT_TRUE(raw.ok());
    const char junk[64] = "GET / HTTP/1.0\r\n\r\n";
    (void)WriteFull(raw->get(), junk, sizeof junk, Deadline::After(milliseconds(5000)), "r0");
  }
  const Deadline d = Deadline::After(milliseconds(10000));
  Status wrong = PeerMesh::Probe(peers[0], "not-the-key", 0, 1, 0, 2, d, d);
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied) << wrong.ToString();
  // The right key from another membership epoch (a rank of an earlier elastic world).
  Status stale = PeerMesh::Probe(peers[0], "mesh-key", 7, 1, 0, 2, d, d);
  EXPECT_EQ(stale.code(), StatusCode::kPermissionDenied) << stale.ToString();
  EXPECT_NE(stale.message().find("epoch 0, this rank to epoch 7"), std::string::npos)
      << stale.ToString();
  EXPECT_TRUE(PeerMesh::Probe(peers[0], "mesh-key", 0, 1, 0, 2, d, d).ok());

  std::jthread rank1([&] { c1 = Communicator::Create(options(1)); });
  rank0.join();
  rank1.join();
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  std::vector<float> a = {1, 2}, b = {10, 20};
  std::jthread t0([&] {
    AllreduceOptions o;
    o.input = o.output = a.data();
    o.count = 2;
    EXPECT_TRUE(Allreduce(**c0, o).ok());
  });
  AllreduceOptions o;
  o.input = o.output = b.data();
  o.count = 2;
  EXPECT_TRUE(Allreduce(**c1, o).ok());
  t0.join();
  EXPECT_EQ(a, (std::vector<float>{11, 22}));
  EXPECT_EQ(b, a);
  ::close(fd0);
  ::close(fd1);
}

// The sidecar's start-up path in threads: discovery by rendezvous over this host's real
// interfaces (one node, so loopback first and shared memory), preflight, the mesh, the probe.
TEST(WorldDiscovery, ByCoordinatorOnOneHost) {
  uint16_t coord_port = 0;
  const int coord_fd = testing::ListenLoopback(&coord_port);
  constexpr int kSize = 3;
  std::vector<std::string> summaries(kSize);
  std::vector<Status> results(kSize);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < kSize; ++r) {
      ranks.emplace_back([&, r] {
        results[r] = [&]() -> Status {
          DiscoveryOptions d;
          d.rank = r;
          d.size = kSize;
          d.coordinator = PeerAddress{"127.0.0.1", coord_port};
          d.coordinator_listen_fd = r == 0 ? coord_fd : -1;
          d.job_key = "discovery-key";
          d.timeout = milliseconds(20000);
          KV_ASSIGN_OR_RETURN(DiscoveredWorld found, DiscoverWorld(d));
          WorldOptions w;
          w.rank = r;
          w.job_key = d.job_key;
          w.connect_timeout = milliseconds(20000);
          ApplyDiscoveredWorld(found, w);
          if (w.peers.size() != kSize || w.ranks[r].node != LocalNodeId()) {
            return Internal("unexpected table: " + FormatWorldTable(w.ranks));
          }
          KV_ASSIGN_OR_RETURN(auto comm, Communicator::Create(w));
          KV_ASSIGN_OR_RETURN(auto rates,
                              ProbeRingLinks(*comm, 1 << 20, Deadline::After(milliseconds(20000))));
          KV_ASSIGN_OR_RETURN(auto interfaces, ListInterfaces());
          summaries[r] = FormatStartupSummary(*comm, rates, interfaces, LocalHostName());
          if (std::string(comm->transport_name()) != "shm") return Internal("expected shm");
          return OkStatus();
        }();
      });
    }
  }
  ::close(coord_fd);
  for (int r = 0; r < kSize; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
    std::printf("%s\n", summaries[r].c_str());
    EXPECT_TRUE(Contains(summaries[r], "iface lo addr 127.0.0.1:")) << summaries[r];
  }
}

TEST(WorldDiscovery, UnknownKorovodIfaceFailsBeforeRegistering) {
  DiscoveryOptions d;
  d.rank = 1;
  d.size = 2;
  d.coordinator = PeerAddress{"127.0.0.1", testing::UnusedLoopbackPort()};
  d.iface = "korovod-no-such-if";
  d.timeout = milliseconds(60000);
  auto found = DiscoverWorld(d);
  ASSERT_FALSE(found.ok());
  EXPECT_TRUE(
      Contains(found.status().message(), "KOROVOD_IFACE=korovod-no-such-if: no such interface"))
      << found.status().ToString();
  EXPECT_TRUE(Contains(found.status().message(), "lo 127.0.0.1")) << found.status().ToString();
}

TEST(WorldDiscovery, ByWorldFile) {
  char path[] = "/tmp/kvworld-XXXXXX";
  const int tmp = ::mkstemp(path);
  ASSERT_GE(tmp, 0);
  ::close(tmp);
  const uint16_t p0 = testing::UnusedLoopbackPort(), p1 = testing::UnusedLoopbackPort();
  {
    std::ofstream out(path);
    out << "# two ranks on this host\n"
        << "rank=0 host=a port=" << p0 << " addr=lo/127.0.0.1 node=one\n"
        << "rank=1 host=b port=" << p1 << " addr=lo/127.0.0.1 node=one\n";
  }
  std::vector<Status> results(2);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        results[r] = [&]() -> Status {
          DiscoveryOptions d;
          d.rank = r;
          d.size = 2;
          d.world_file = path;
          d.iface = "lo";
          KV_ASSIGN_OR_RETURN(DiscoveredWorld found, DiscoverWorld(d));
          WorldOptions w;
          w.rank = r;
          w.connect_timeout = milliseconds(20000);
          ApplyDiscoveredWorld(found, w);
          KV_ASSIGN_OR_RETURN(auto comm, Communicator::Create(w));
          return ProbeRingLinks(*comm, 1 << 20, Deadline::After(milliseconds(20000))).status();
        }();
      });
    }
  }
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
  DiscoveryOptions bad;
  bad.rank = 0;
  bad.size = 2;
  bad.world_file = path;
  bad.iface = "eth7";
  auto refused = DiscoverWorld(bad);
  std::remove(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.status().message(),
                       "KOROVOD_IFACE=eth7: rank 0 (host a) has no address on eth7"))
      << refused.status().ToString();
}

}  // namespace
}  // namespace korovod
