// Collective lanes at the communicator: TCP worlds made with collective_lanes > 1 hand out that
// many communicators over their own connections, whose collectives run at the same time from
// different threads with exact results; shared memory and lanes <= 1 make none; a connection count
// beyond the mesh's limit is refused naming both settings.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {
namespace {

TEST(CommunicatorLanes, LanesRunCollectivesConcurrentlyWithTheMainCommunicator) {
  constexpr int kLanes = 3;
  WorldSpec spec;
  spec.size = 3;
  spec.transport = TransportKind::kTcp;
  spec.customize = [](WorldOptions& o) { o.collective_lanes = kLanes; };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    std::vector<std::unique_ptr<Communicator>> lanes = ctx.comm().TakeLanes();
    if (!ctx.Check(lanes.size() == kLanes, "lanes " + std::to_string(lanes.size()))) {
      return OkStatus();
    }
    ctx.Check(ctx.comm().TakeLanes().empty(), "lanes handed out twice");
    // Every lane and the main communicator run different allreduces at once, 20 each.
    std::vector<Communicator*> comms = {&ctx.comm()};
    for (auto& l : lanes) comms.push_back(l.get());
    std::vector<Status> results(comms.size());
    std::vector<std::vector<float>> out(comms.size());
    std::vector<std::thread> threads;
    for (size_t c = 0; c < comms.size(); ++c) {
      threads.emplace_back([&, c] {
        std::vector<float> v(300000);  // striped over the lane's streams
        for (int iter = 0; iter < 20 && results[c].ok(); ++iter) {
          for (size_t i = 0; i < v.size(); ++i) {
            v[i] = static_cast<float>((ctx.rank() + 1) * (c + 1) + i % 5 + iter);
          }
          AllreduceOptions o;
          o.input = o.output = v.data();
          o.count = v.size();
          results[c] = Allreduce(*comms[c], o);
        }
        out[c] = v;
      });
    }
    for (auto& t : threads) t.join();
    for (size_t c = 0; c < comms.size(); ++c) {
      KV_RETURN_IF_ERROR(results[c]);
      for (size_t i = 0; i < out[c].size(); i += 1009) {
        // Sum over ranks r of (r + 1)(c + 1) + i % 5 + 19.
        const float want = static_cast<float>(6 * (c + 1) + 3 * (i % 5 + 19));
        if (!ctx.Check(out[c][i] == want, "communicator " + std::to_string(c) + " element " +
                                              std::to_string(i) + " = " +
                                              std::to_string(out[c][i]))) {
          break;
        }
      }
    }
    return OkStatus();
  }));
}

TEST(CommunicatorLanes, SharedMemoryAndOneLaneMakeNone) {
  for (auto [transport, lanes] : {std::pair{TransportKind::kShm, 4}, {TransportKind::kTcp, 1}}) {
    WorldSpec spec;
    spec.size = 2;
    spec.transport = transport;
    spec.customize = [lanes = lanes](WorldOptions& o) { o.collective_lanes = lanes; };
    ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
      ctx.Check(ctx.comm().TakeLanes().empty(),
                std::string("lanes over ") + TransportName(transport));
      return OkStatus();
    }));
  }
}

// A rank that expects more connections than its peer opens names the setting that differs
// instead of only timing out.
TEST(CommunicatorLanes, RanksWithDifferentLanesNameTheSetting) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kTcp;
  spec.connect_timeout = std::chrono::milliseconds(3000);
  spec.customize = [](WorldOptions& o) { o.collective_lanes = o.rank == 0 ? 3 : 1; };
  ThreadWorld world = RunThreadRanks(spec, [](RankContext&) { return OkStatus(); });
  const RankReport& r0 = world.reports[0];
  EXPECT_FALSE(r0.created);
  EXPECT_NE(r0.status.message().find("opened 5 of the 17 connections"), std::string::npos)
      << r0.status.ToString();
  EXPECT_NE(r0.status.message().find("KOROVOD_COLLECTIVE_LANES differ"), std::string::npos)
      << r0.status.ToString();
}

TEST(CommunicatorLanes, TooManyConnectionsPerPeerAreRefused) {
  WorldOptions o;
  o.rank = 0;
  o.peers = {{"127.0.0.1", UnusedLoopbackPort()}, {"127.0.0.1", UnusedLoopbackPort()}};
  o.transport = TransportKind::kTcp;
  o.tcp_streams = 8;
  o.collective_lanes = 8;  // 8 x (1 + 8) > 64
  auto comm = Communicator::Create(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("collective lanes"), std::string::npos)
      << comm.status().ToString();
}

}  // namespace
}  // namespace korovod::testing
