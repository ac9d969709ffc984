// Hierarchical collectives: the host layout and the choice (on where every host holds the same
// number > 1 of ranks, off with the reason otherwise, an error when forced on where it cannot
// be), exact results equal to the flat ring's on every layout, op and size, the same bits on every
// rank, the phases it runs (and that small messages, process sets and layouts without a
// hierarchy stay flat), and a rank killed in the middle of one named by every survivor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "runtime/world/host_layout.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {
namespace {

using std::chrono::seconds;

TEST(HostLayout, GroupsRanksByHostAndPairsLocalIndices) {
  const HostLayout l = HostLayoutOf({"b", "a", "b", "a", "b", "a"});
  ASSERT_EQ(l.hosts.size(), 2u);
  EXPECT_EQ(l.hosts[0], (std::vector<int>{0, 2, 4}));  // "b": the host of rank 0 comes first
  EXPECT_EQ(l.hosts[1], (std::vector<int>{1, 3, 5}));
  EXPECT_TRUE(l.homogeneous());
  EXPECT_EQ(l.local_rank(4), 2);
  EXPECT_EQ(l.local_size(3), 3);
  EXPECT_EQ(l.CrossRanks(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(l.LocalRanks(5), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(l.Describe(), "2 hosts x 3 ranks");
  EXPECT_EQ(HostLayoutOf({"a", "a", "b"}).Describe(), "2 hosts of 2, 1 ranks");
  EXPECT_EQ(HostLayoutOf({"a"}).Describe(), "1 host x 1 rank");
}

TEST(HostLayout, ChoiceSaysWhyAndRefusesAForcedHierarchyThatCannotBe) {
  struct Case {
    std::vector<std::string> hosts;
    bool on;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{
           {{"a", "a", "b", "b"}, true, "2 hosts x 2 ranks"},
           {{"a", "a", "a"}, false, "one host"},
           {{"a", "b", "c"}, false, "1 rank per host"},
           {{"a", "a", "b"}, false, "2 hosts of 2, 1 ranks: hosts hold different numbers of ranks"},
       }) {
    SCOPED_TRACE(HostLayoutOf(c.hosts).Describe());
    auto autod = ChooseHierarchy(HostLayoutOf(c.hosts), HierarchyMode::kAuto);
    ASSERT_TRUE(autod.ok()) << autod.status().ToString();
    EXPECT_EQ(autod->on, c.on);
    EXPECT_EQ(autod->reason, c.reason);
    auto forced = ChooseHierarchy(HostLayoutOf(c.hosts), HierarchyMode::kOn);
    EXPECT_EQ(forced.ok(), c.on);
    if (!c.on) {
      EXPECT_EQ(forced.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(forced.status().message().find(c.reason), std::string::npos)
          << forced.status().ToString();
    }
    auto off = ChooseHierarchy(HostLayoutOf(c.hosts), HierarchyMode::kOff);
    ASSERT_TRUE(off.ok());
    EXPECT_FALSE(off->on);
    EXPECT_EQ(off->reason, "turned off");
  }
}

// Records the phases the collectives run (the timeline's hook).
class PhaseLog : public PhaseObserver {
 public:
  void PhaseBegin(const char* phase) override { phases.emplace_back(phase); }
  void PhaseEnd() override {}
  bool Saw(const std::string& p) const {
    for (const std::string& s : phases) {
      if (s == p) return true;
    }
    return false;
  }
  std::vector<std::string> phases;
};

uint64_t Digest(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct LayoutParam {
  std::vector<std::string> hosts;
  std::string name;
};

class Hierarchical : public ::testing::TestWithParam<LayoutParam> {};

TEST_P(Hierarchical, ExactOnEveryOpAndSizeAndTheSameBitsEverywhere) {
  WorldSpec spec;
  spec.size = static_cast<int>(GetParam().hosts.size());
  spec.transport = TransportKind::kAuto;
  const std::vector<std::string> hosts = GetParam().hosts;
  spec.customize = [hosts](WorldOptions& o) {
    o.hosts = hosts;
    o.collective_lanes = 2;  // each lane gets its own shared memory among the host's ranks
  };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    Communicator& comm = ctx.comm();
    const int n = comm.size();
    const int r = ctx.rank();
    ctx.Check(comm.hierarchy().on, "hierarchy off: " + comm.hierarchy().reason);
    ctx.Check(std::string(comm.transport_name()) == "tcp",
              "transport " + std::string(comm.transport_name()));
    ctx.Check(
        comm.local_transport() != nullptr && std::string(comm.local_transport()->Name()) == "shm",
        "no shared memory among the host's ranks");
    ctx.Check(comm.local_set().size() * comm.cross_set().size() == n, "local x cross != size");
    PhaseLog log;
    comm.set_phase_observer(&log);
    // Integer-valued floats: every summation order gives the same exact result.
    for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{300001}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kProduct}) {
        for (auto algo : {AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kRing}) {
          std::vector<float> v(count);
          for (size_t i = 0; i < count; ++i) {
            v[i] = static_cast<float>(op == ReduceOp::kProduct ? 1 + (r + i) % 2 : r + 1 + i % 7);
          }
          AllreduceOptions o;
          o.input = o.output = v.data();
          o.count = count;
          o.op = op;
          o.algorithm = algo;
          o.prescale = op == ReduceOp::kSum ? 2.0 : 1.0;
          o.postscale = op == ReduceOp::kSum ? 0.5 : 1.0;
          KV_RETURN_IF_ERROR(Allreduce(comm, o));
          for (size_t i = 0; i < count; i += 1 + count / 50) {
            double want = 0;
            if (op == ReduceOp::kProduct) {
              want = 1;
              for (int k = 0; k < n; ++k) want *= 1 + (k + i) % 2;
            } else if (op == ReduceOp::kMin) {
              want = 1 + i % 7;
            } else if (op == ReduceOp::kMax) {
              want = n + i % 7;
            } else {
              want = n * (n + 1) / 2.0 + n * double(i % 7);
              if (op == ReduceOp::kAverage) want /= n;
            }
            if (!ctx.Check(v[i] == static_cast<float>(want),
                           std::string(AllreduceAlgorithmName(algo)) + " " + ReduceOpName(op) +
                               " count " + std::to_string(count) + " [" + std::to_string(i) +
                               "] = " + std::to_string(v[i]) + ", want " + std::to_string(want))) {
              break;
            }
          }
        }
      }
    }
    ctx.Check(log.Saw("HIERARCHICAL_LOCAL_REDUCE_SCATTER") &&
                  log.Saw("HIERARCHICAL_CROSS_ALLREDUCE") &&
                  log.Saw("HIERARCHICAL_LOCAL_ALLGATHER"),
              "the hierarchical phases did not run");
    // Inexact data (float rounding depends on the order): every rank holds the same bits, and
    // the automatic choice takes the hierarchy above the small-message crossover only.
    for (size_t count : {size_t{100}, size_t{1} << 18}) {
      log.phases.clear();
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = std::sin(0.001f * i + r) / 3.0f;
      AllreduceOptions o;
      o.input = o.output = v.data();
      o.count = count;
      KV_RETURN_IF_ERROR(Allreduce(comm, o));
      ctx.RecordDigest("auto " + std::to_string(count), Digest(v.data(), count * sizeof(float)));
      const bool large = count * sizeof(float) > comm.small_allreduce_max_bytes();
      ctx.Check(log.Saw("HIERARCHICAL_CROSS_ALLREDUCE") == large,
                "count " + std::to_string(count) + ": hierarchical " +
                    (large ? "not taken" : "taken for a small message"));
    }
    // int32 through the hierarchy.
    std::vector<int32_t> iv(70001);
    for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int32_t>(i) * (r + 1);
    AllreduceOptions io;
    io.input = io.output = iv.data();
    io.count = iv.size();
    io.type = DataType::kInt32;
    io.algorithm = AllreduceAlgorithm::kHierarchical;
    KV_RETURN_IF_ERROR(Allreduce(comm, io));
    for (size_t i = 0; i < iv.size(); i += 997) {
      if (!ctx.Check(iv[i] == static_cast<int32_t>(i) * (n * (n + 1) / 2),
                     "int32 [" + std::to_string(i) + "] = " + std::to_string(iv[i]))) {
        break;
      }
    }
    // A process set short of the world runs flat, and the hierarchical algorithm refuses it.
    std::vector<int> members;
    for (int k = 0; k < n - 1; ++k) members.push_back(k);
    KV_ASSIGN_OR_RETURN(ProcessSet set, ProcessSet::Create(members, n, r));
    if (set.contains_me()) {
      log.phases.clear();
      std::vector<float> v(1 << 18, static_cast<float>(r + 1));
      AllreduceOptions o;
      o.input = o.output = v.data();
      o.count = v.size();
      o.set = &set;
      KV_RETURN_IF_ERROR(Allreduce(comm, o));
      ctx.Check(v[12345] == static_cast<float>((n - 1) * n / 2), "process set sum");
      ctx.Check(!log.Saw("HIERARCHICAL_CROSS_ALLREDUCE"), "a process set went hierarchical");
      o.algorithm = AllreduceAlgorithm::kHierarchical;
      const Status refused = Allreduce(comm, o);
      ctx.Check(refused.code() == StatusCode::kInvalidArgument,
                "hierarchical on a process set: " + refused.ToString());
    }
    // Broadcast from every root goes across hosts then inside each; exact on every rank.
    for (int root = 0; root < n; ++root) {
      for (size_t count : {size_t{1}, size_t{100000}}) {
        log.phases.clear();
        std::vector<int32_t> b(count, r == root ? 0 : -1);
        if (r == root) {
          for (size_t i = 0; i < count; ++i) b[i] = static_cast<int32_t>(i * 7 + root);
        }
        BroadcastOptions bo;
        bo.buffer = b.data();
        bo.count = count;
        bo.type = DataType::kInt32;
        bo.root = root;
        KV_RETURN_IF_ERROR(Broadcast(comm, bo));
        bool exact = true;
        for (size_t i = 0; i < count; ++i)
          exact = exact && b[i] == static_cast<int32_t>(i * 7 + root);
        ctx.Check(exact, "broadcast from " + std::to_string(root) + " of " + std::to_string(count));
        ctx.Check(log.Saw("HIERARCHICAL_LOCAL_BROADCAST"), "broadcast was not hierarchical");
      }
    }
    // Allgather of uneven blocks (one empty): hierarchical where hosts hold consecutive ranks.
    const bool contiguous = comm.host_layout().contiguous();
    std::vector<size_t> counts(n);
    size_t total = 0;
    for (int k = 0; k < n; ++k) total += counts[k] = k == 1 ? 0 : 1000 * k + 3;
    std::vector<float> mine(counts[r]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(r * 100000 + i);
    std::vector<float> all(total, -1.0f);
    log.phases.clear();
    AllgatherOptions ao;
    ao.input = mine.data();
    ao.output = all.data();
    ao.counts = counts;
    KV_RETURN_IF_ERROR(Allgather(comm, ao));
    size_t at = 0;
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < counts[k]; ++i, ++at) {
        if (!ctx.Check(all[at] == static_cast<float>(k * 100000 + i),
                       "allgather block " + std::to_string(k) + "[" + std::to_string(i) + "]")) {
          k = n;
          break;
        }
      }
    }
    ctx.Check(log.Saw("HIERARCHICAL_LOCAL_ALLGATHER") == contiguous,
              std::string("allgather ") + (contiguous ? "not hierarchical" : "hierarchical") +
                  " on " + comm.host_layout().Describe());
    ctx.Check(
        log.Saw("HIERARCHICAL_CROSS_ALLGATHER") == (contiguous && comm.local_set().rank() == 0),
        "only the hosts' first ranks cross the network");
    // Lanes run the hierarchy over their own connections and shared memory, at the same time.
    std::vector<std::unique_ptr<Communicator>> lanes = comm.TakeLanes();
    ctx.Check(lanes.size() == 2, "lanes " + std::to_string(lanes.size()));
    std::vector<Status> results(lanes.size());
    std::vector<std::thread> threads;
    for (size_t l = 0; l < lanes.size(); ++l) {
      threads.emplace_back([&, l] {
        ctx.Check(lanes[l]->hierarchy().on && lanes[l]->local_transport() != nullptr,
                  "lane without a hierarchy");
        std::vector<float> v(200000);
        for (int iter = 0; iter < 5 && results[l].ok(); ++iter) {
          for (size_t i = 0; i < v.size(); ++i)
            v[i] = static_cast<float>((r + 1) * (l + 1) + i % 3);
          AllreduceOptions o;
          o.input = o.output = v.data();
          o.count = v.size();
          o.algorithm = AllreduceAlgorithm::kHierarchical;
          results[l] = Allreduce(*lanes[l], o);
        }
        ctx.Check(v[7] == static_cast<float>((l + 1) * n * (n + 1) / 2 + n * 1), "lane sum");
      });
    }
    for (auto& t : threads) t.join();
    for (const Status& s : results) KV_RETURN_IF_ERROR(s);
    comm.set_phase_observer(nullptr);
    return OkStatus();
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Hierarchical,
    ::testing::Values(LayoutParam{{"a", "a", "b", "b"}, "TwoHostsOfTwo"},
                      LayoutParam{{"a", "a", "b", "b", "c", "c"}, "ThreeHostsOfTwo"},
                      LayoutParam{{"a", "a", "a", "b", "b", "b"}, "TwoHostsOfThree"},
                      LayoutParam{{"a", "b", "a", "b"}, "Interleaved"}),
    [](const ::testing::TestParamInfo<LayoutParam>& info) { return info.param.name; });

TEST(HierarchicalChoice, UnevenHostsRunFlatAndAForcedHierarchyIsRefusedAtCreate) {
  WorldSpec spec;
  spec.size = 3;
  spec.transport = TransportKind::kAuto;
  spec.customize = [](WorldOptions& o) { o.hosts = {"a", "a", "b"}; };
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    ctx.Check(!ctx.comm().hierarchy().on, "hierarchy on for uneven hosts");
    ctx.Check(ctx.comm().local_transport() == nullptr, "a local transport without a hierarchy");
    std::vector<float> v(1 << 18, 1.0f);
    AllreduceOptions o;
    o.input = o.output = v.data();
    o.count = v.size();
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o));
    ctx.Check(v[99] == 3.0f, "flat sum");
    return OkStatus();
  }));

  spec.customize = [](WorldOptions& o) {
    o.hosts = {"a", "a", "b"};
    o.hierarchical = HierarchyMode::kOn;
  };
  ThreadWorld refused = RunThreadRanks(spec, [](RankContext&) { return OkStatus(); });
  for (const RankReport& r : refused.reports) {
    EXPECT_FALSE(r.created) << "rank " << r.rank;
    EXPECT_NE(r.status.message().find("2 hosts of 2, 1 ranks"), std::string::npos)
        << "rank " << r.rank << ": " << r.status.ToString();
  }
}

TEST(HierarchicalChoice, RanksThatChooseDifferentlyRefuseToStartNamingTheSetting) {
  WorldSpec spec;
  spec.size = 4;
  spec.transport = TransportKind::kAuto;
  spec.connect_timeout = std::chrono::milliseconds(10000);
  spec.customize = [](WorldOptions& o) {
    o.hosts = {"a", "a", "b", "b"};
    if (o.rank == 3) o.hierarchical = HierarchyMode::kOff;
  };
  ThreadWorld w = RunThreadRanks(spec, [](RankContext&) { return OkStatus(); });
  int named = 0;
  for (const RankReport& r : w.reports) {
    EXPECT_FALSE(r.created) << "rank " << r.rank << " started with a mismatched hierarchy";
    if (r.status.message().find("KOROVOD_HIERARCHICAL_ALLREDUCE") != std::string::npos) ++named;
  }
  // Every rank that talked to rank 3 (all of them) says which setting differs.
  EXPECT_EQ(named, 4) << w.reports[0].status.ToString() << " / " << w.reports[3].status.ToString();
}

TEST(HierarchicalFailure, ARankKilledMidAllreduceIsNamedByEverySurvivor) {
  constexpr int kVictim = 2;
  WorldSpec spec;
  spec.size = 4;
  spec.transport = TransportKind::kAuto;
  spec.op_timeout = seconds(10);
  spec.customize = [](WorldOptions& o) { o.hosts = {"a", "a", "b", "b"}; };
  auto world = ProcessWorld::Start(
      spec, [&](Communicator& comm, const std::function<void()>& ready) -> Status {
        if (!comm.hierarchy().on) return Internal("no hierarchy: " + comm.hierarchy().reason);
        std::vector<float> buf(8 << 20, 1.0f);
        AllreduceOptions o;
        o.input = o.output = buf.data();
        o.count = buf.size();
        o.op = ReduceOp::kMax;
        const auto start = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - start < seconds(120)) {
          const Status s = Allreduce(comm, o);
          if (!s.ok()) return s;
          ready();
        }
        return Internal("no allreduce failed within 120 s");
      });
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  ProcessWorld& w = *world.value();
  ASSERT_TRUE(w.WaitReady(Deadline::After(seconds(60))));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  w.Kill(kVictim);
  for (int r = 0; r < spec.size; ++r) {
    if (r == kVictim) continue;
    const auto report = w.WaitReport(r, Deadline::After(seconds(25)));
    ASSERT_TRUE(report.has_value()) << "rank " << r << " reported nothing after the kill";
    EXPECT_FALSE(report->status.ok()) << "rank " << r;
    EXPECT_NE(report->status.message().find("rank 2"), std::string::npos)
        << "rank " << r << ": " << report->status.ToString();
    EXPECT_EQ(w.WaitExit(r, Deadline::After(seconds(20))), "exit 0") << "rank " << r;
  }
}

}  // namespace
}  // namespace korovod::testing
