// What a user sees when something goes wrong: a rank dies mid-collective, a peer never comes, a
// rank holds the wrong job key, or a collective is called with bad arguments.
#include <chrono>
#include <cstdio>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/collectives/collectives.h"
#include "runtime/world/communicator.h"
#include "tests/runtime/rank_harness.h"
#include "tests/runtime/test_data.h"

namespace korovod::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string TransportParamName(const ::testing::TestParamInfo<TransportKind>& info) {
  return TransportName(info.param);
}

// ---- (a) A rank is SIGKILLed in the middle of a stream of allreduces ----

class RankKilled : public ::testing::TestWithParam<TransportKind> {};

TEST_P(RankKilled, SurvivorsReportTheDeadRankAndShutDownCleanly) {
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  constexpr size_t kElements = 32 * 1024 * 1024 / sizeof(float);  // 32 MiB of float32
  const auto kOpTimeout = seconds(10);
  const auto kReportWithin = seconds(15);  // op timeout plus generous slack

  WorldSpec spec;
  spec.size = kRanks;
  spec.transport = GetParam();
  spec.op_timeout = kOpTimeout;
  // Each child loops allreduces until one fails, then checks that the communicator stays broken
  // (the next collective fails at once with the same cause) and returns the first error.
  auto world = ProcessWorld::Start(
      spec, [&](Communicator& comm, const std::function<void()>& ready) -> Status {
        std::vector<float> buf(kElements, 1.0f);
        AllreduceOptions o;
        o.input = o.output = buf.data();
        o.count = buf.size();
        o.op = ReduceOp::kMax;  // keeps the values at 1 however many rounds run
        const auto start = Clock::now();
        while (Clock::now() - start < seconds(120)) {
          const Status s = Allreduce(comm, o);
          if (s.ok()) {
            ready();
            continue;
          }
          const auto again_start = Clock::now();
          const Status again = Allreduce(comm, o);
          const double again_s = SecondsBetween(again_start, Clock::now());
          if (again.ok()) {
            return Internal("an allreduce after the failure succeeded; the failure was: " +
                            s.ToString());
          }
          if (again_s > 5.0) {
            return Internal("the allreduce after the failure took " + std::to_string(again_s) +
                            " s to fail (a broken communicator should fail at once); the failure "
                            "was: " +
                            s.ToString());
          }
          return s;
        }
        return Internal("no allreduce failed within 120 s");
      });
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  ProcessWorld& w = *world.value();
  const std::string victim = "rank " + std::to_string(kVictim);
  const std::string victim_addr = w.peers()[kVictim].ToString();

  ASSERT_TRUE(w.WaitReady(Deadline::After(seconds(60))))
      << "the ranks did not complete a first allreduce within 60 s";
  std::this_thread::sleep_for(milliseconds(300));
  const Clock::time_point killed_at = Clock::now();
  w.Kill(kVictim);

  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto report = w.WaitReport(r, Deadline(killed_at + kReportWithin));
    if (!report.has_value()) {
      ADD_FAILURE() << "rank " << r << " reported nothing within " << kReportWithin.count()
                    << " s of the kill (exit: " << w.WaitExit(r, Deadline::After(seconds(1)))
                    << ")";
      continue;
    }
    const double after = SecondsBetween(killed_at, report->at);
    std::printf("rank %d reported %.3f s after the kill: %s\n", r, after,
                report->status.ToString().c_str());
    EXPECT_FALSE(report->status.ok()) << "rank " << r << " returned OK";
    EXPECT_GE(after, 0.0) << "rank " << r << " failed before " << victim
                          << " was killed: " << report->status.ToString();
    EXPECT_LE(after, std::chrono::duration<double>(kReportWithin).count());
    EXPECT_TRUE(Contains(report->status.message(), victim))
        << "rank " << r << "'s error does not name " << victim << ": " << report->status.ToString();
    EXPECT_TRUE(Contains(report->status.message(), victim_addr))
        << "rank " << r << "'s error does not name " << victim_addr << ": "
        << report->status.ToString();
  }
  for (int r = 0; r < kRanks; ++r) {
    const std::string exit = w.WaitExit(r, Deadline::After(seconds(20)));
    if (r == kVictim) {
      EXPECT_EQ(exit, "signal 9 (Killed)") << "rank " << r;
    } else {
      EXPECT_EQ(exit, "exit 0") << "rank " << r << " did not shut down cleanly after the failure";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transport, RankKilled,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         TransportParamName);

// ---- (b) A peer that never comes ----

struct AbsentParam {
  int absent;    // the rank that is never started, in a world of 3
  bool listens;  // its port accepts TCP connections (backlog) but nobody answers
};

void PrintTo(const AbsentParam& p, std::ostream* os) {
  *os << "rank " << p.absent << (p.listens ? " listening" : " with a closed port");
}

class PeerNeverComes : public ::testing::TestWithParam<AbsentParam> {};

TEST_P(PeerNeverComes, OthersFailNamingItWithinTheConnectTimeout) {
  const AbsentParam p = GetParam();
  WorldSpec spec;
  spec.size = 3;
  spec.absent_ranks = {p.absent};
  spec.absent_rank_listens = p.listens;
  spec.connect_timeout = milliseconds(2000);
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext&) -> Status {
    return Internal("Communicator::Create succeeded although a rank never started");
  });
  const std::string absent = "rank " + std::to_string(p.absent);
  const std::string addr = world.peers[p.absent].ToString();
  for (const RankReport& r : world.reports) {
    if (!r.started) continue;
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    const double took = std::chrono::duration<double>(r.elapsed).count();
    std::printf("rank %d failed after %.2f s: %s\n", r.rank, took, r.status.ToString().c_str());
    EXPECT_FALSE(r.created) << "Create succeeded without " << absent;
    EXPECT_FALSE(r.status.ok());
    EXPECT_TRUE(Contains(r.status.message(), absent))
        << "error does not name " << absent << ": " << r.status.ToString();
    EXPECT_TRUE(Contains(r.status.message(), addr))
        << "error does not name " << addr << ": " << r.status.ToString();
    EXPECT_LT(took, 2.0 + 10.0) << "connect_timeout is 2 s";
  }
}

INSTANTIATE_TEST_SUITE_P(World3, PeerNeverComes,
                         ::testing::Values(AbsentParam{2, false}, AbsentParam{2, true},
                                           AbsentParam{0, false}, AbsentParam{0, true}),
                         [](const ::testing::TestParamInfo<AbsentParam>& info) {
                           return "absent_rank" + std::to_string(info.param.absent) +
                                  (info.param.listens ? "_listening" : "_closed_port");
                         });

// ---- (c) A rank with the wrong job key ----

struct KeyParam {
  int bad_rank;     // in a world of 3
  std::string key;  // what that rank holds instead of the job key
};

void PrintTo(const KeyParam& p, std::ostream* os) {
  *os << "rank " << p.bad_rank << " holds key '" << p.key << "'";
}

class WrongJobKey : public ::testing::TestWithParam<KeyParam> {};

// Nobody gets a working communicator. The rank with the wrong key and every rank that meets it
// get PERMISSION_DENIED naming the other side.
TEST_P(WrongJobKey, ConnectionIsRefusedWithAnAuthenticationError) {
  const KeyParam p = GetParam();
  WorldSpec spec;
  spec.size = 3;
  spec.connect_timeout = milliseconds(3000);
  spec.customize = [p](WorldOptions& o) {
    if (o.rank == p.bad_rank) o.job_key = p.key;
  };
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext&) -> Status {
    return Internal("Communicator::Create succeeded with a mismatched job key");
  });
  const std::string bad = "rank " + std::to_string(p.bad_rank);
  const std::string bad_addr = world.peers[p.bad_rank].ToString();
  for (const RankReport& r : world.reports) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    std::printf("rank %d: %s\n", r.rank, r.status.ToString().c_str());
    EXPECT_FALSE(r.created) << "Create succeeded";
    EXPECT_EQ(r.status.code(), StatusCode::kPermissionDenied) << r.status.ToString();
    EXPECT_TRUE(Contains(r.status.message(), "job key")) << r.status.ToString();
    if (r.rank != p.bad_rank) {
      EXPECT_TRUE(Contains(r.status.message(), bad + " (" + bad_addr + ")"))
          << "error does not name " << bad << " (" << bad_addr << "): " << r.status.ToString();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(World3, WrongJobKey,
                         ::testing::Values(KeyParam{2, "not-the-job-key"}, KeyParam{0, "x"},
                                           KeyParam{1, ""}),
                         [](const ::testing::TestParamInfo<KeyParam>& info) {
                           return "rank" + std::to_string(info.param.bad_rank) +
                                  (info.param.key.empty() ? "_no_key" : "_wrong_key");
                         });

// A job without a key works: empty job_key on every rank means unauthenticated.
TEST(JobKey, EmptyKeyOnEveryRankWorks) {
  WorldSpec spec;
  spec.size = 2;
  spec.job_key = "";
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext& ctx) -> Status {
    int32_t v[2] = {ctx.rank(), 5};
    AllreduceOptions o;
    o.input = o.output = v;
    o.count = 2;
    o.type = DataType::kInt32;
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o));
    ctx.Check(v[0] == 1 && v[1] == 10, "wrong allreduce result");
    return OkStatus();
  });
  ExpectAllRanksOk(world);
}

// ---- (d) Bad arguments ----

class BadArguments : public ::testing::TestWithParam<TransportKind> {};

// Every rank makes the same bad calls; each returns INVALID_ARGUMENT without talking to a peer,
// and the communicator keeps working.
TEST_P(BadArguments, AreRejectedAndTheCommunicatorStillWorks) {
  WorldSpec spec;
  spec.size = 3;
  spec.transport = GetParam();
  const ThreadWorld world = RunThreadRanks(spec, [](RankContext& ctx) -> Status {
    const int n = ctx.size();
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float y[32] = {};
    const std::vector<size_t> ones(n, 1), short_counts(n - 1, 1), long_counts(n + 1, 1);
    auto expect_invalid = [&](const std::string& what, const Status& s) {
      ctx.Check(s.code() == StatusCode::kInvalidArgument,
                what + ": expected INVALID_ARGUMENT, got " + s.ToString());
      ctx.Check(!s.message().empty(), what + ": empty error message");
    };
    for (int root : {-1, n, 1000}) {
      BroadcastOptions o;
      o.buffer = x;
      o.count = 4;
      o.root = root;
      expect_invalid("broadcast root " + std::to_string(root), Broadcast(ctx.comm(), o));
    }
    {
      BroadcastOptions o;
      o.count = 3;
      expect_invalid("broadcast of 3 elements from a null buffer", Broadcast(ctx.comm(), o));
    }
    {
      AllreduceOptions o;
      o.output = y;
      o.count = 5;
      expect_invalid("allreduce with a null input", Allreduce(ctx.comm(), o));
      o.input = x;
      o.output = nullptr;
      expect_invalid("allreduce with a null output", Allreduce(ctx.comm(), o));
      o.output = y;
      o.type = static_cast<DataType>(200);
      expect_invalid("allreduce with dtype 200", Allreduce(ctx.comm(), o));
      o.type = DataType::kFloat32;
      o.op = static_cast<ReduceOp>(77);
      expect_invalid("allreduce with op 77", Allreduce(ctx.comm(), o));
    }
    {
      AllgatherOptions o;
      o.input = x;
      o.output = y;
      o.counts = short_counts;
      expect_invalid("allgather with counts for n-1 ranks", Allgather(ctx.comm(), o));
      o.counts = long_counts;
      expect_invalid("allgather with counts for n+1 ranks", Allgather(ctx.comm(), o));
      o.counts = ones;
      o.input = nullptr;
      expect_invalid("allgather with a null input", Allgather(ctx.comm(), o));
      o.input = x;
      o.output = nullptr;
      expect_invalid("allgather with a null output", Allgather(ctx.comm(), o));
    }
    {
      AlltoallOptions o;
      o.input = x;
      o.output = y;
      o.send_counts = short_counts;
      o.recv_counts = ones;
      expect_invalid("alltoall with send_counts for n-1 ranks", Alltoall(ctx.comm(), o));
      o.send_counts = ones;
      o.recv_counts = long_counts;
      expect_invalid("alltoall with recv_counts for n+1 ranks", Alltoall(ctx.comm(), o));
      o.recv_counts = ones;
      o.input = nullptr;
      expect_invalid("alltoall with a null input", Alltoall(ctx.comm(), o));
      o.input = x;
      o.output = nullptr;
      expect_invalid("alltoall with a null output", Alltoall(ctx.comm(), o));
    }
    {
      ReduceScatterOptions o;
      o.input = x;
      o.output = y;
      o.recv_counts = short_counts;
      expect_invalid("reducescatter with recv_counts for n-1 ranks", ReduceScatter(ctx.comm(), o));
      o.recv_counts = {};
      expect_invalid("reducescatter with no recv_counts", ReduceScatter(ctx.comm(), o));
      o.recv_counts = ones;
      o.input = nullptr;
      expect_invalid("reducescatter with a null input", ReduceScatter(ctx.comm(), o));
      o.input = x;
      o.output = nullptr;
      expect_invalid("reducescatter with a null output", ReduceScatter(ctx.comm(), o));
    }
    // Still usable: every collective works afterwards.
    float v[3] = {1.0f + ctx.rank(), 2, 3};
    AllreduceOptions ar;
    ar.input = ar.output = v;
    ar.count = 3;
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), ar).WithContext("allreduce after the bad calls"));
    ctx.Check(v[0] == n * (n + 1) / 2.0f && v[1] == 2.0f * n && v[2] == 3.0f * n,
              "allreduce after the bad calls gave wrong values");
    float b[4] = {};
    if (ctx.rank() == n - 1) std::copy(x, x + 4, b);
    BroadcastOptions bc;
    bc.buffer = b;
    bc.count = 4;
    bc.root = n - 1;
    KV_RETURN_IF_ERROR(Broadcast(ctx.comm(), bc).WithContext("broadcast after the bad calls"));
    ctx.Check(b[0] == 1 && b[3] == 4, "broadcast after the bad calls gave wrong values");
    KV_RETURN_IF_ERROR(Barrier(ctx.comm()).WithContext("barrier after the bad calls"));
    return OkStatus();
  });
  ExpectAllRanksOk(world);
}

INSTANTIATE_TEST_SUITE_P(Transport, BadArguments,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         TransportParamName);

}  // namespace
}  // namespace korovod::testing
