// Starts real korovod-sidecar processes with korovodrun's environment contract and drives them
// with korovod_client from forked trainer processes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sidecar/client/client.h"
#include "sidecar/daemon/sidecar_config.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;
using daemon_test::HttpGet;
using daemon_test::Job;
using daemon_test::Must;

// The ops every trainer of an n-rank job runs.
void RunOps(int rank, const std::string& socket) {
  auto client = Must(Client::Connect(socket, 10s));
  TCHECK(client->rank() == rank);
  const int n = client->size();
  const float tri = n * (n + 1) / 2.0f;

  // Zero copy allreduce.
  {
    ArenaBuffer buf = Must(client->Allocate(1024 * sizeof(float)));
    for (float& v : buf.as<float>()) v = static_cast<float>(rank + 1);
    ClientHandle h = Must(client->Allreduce(buf, buf, DataType::kFloat32, {1024}, {.name = "zc"}));
    TOK(h.Wait(Deadline::After(10s)));
    for (float v : buf.as<float>()) TCHECK(v == tri);
  }
  // Plain pointer allreduce.
  {
    std::vector<float> in(100, static_cast<float>(rank + 1)), out(100, 0);
    ClientHandle h = Must(
        client->Allreduce(in.data(), out.data(), DataType::kFloat32, {10, 10}, {.name = "pp"}));
    TOK(h.Wait(Deadline::After(10s)));
    for (float v : out) TCHECK(v == tri);
  }
  // Allgather with uneven rows: rank r has r+1 rows of 3.
  {
    std::vector<int32_t> in(3 * (rank + 1), rank);
    ClientHandle h =
        Must(client->Allgather(in.data(), DataType::kInt32, {rank + 1, 3}, {.name = "gather"}));
    TOK(h.Wait(Deadline::After(10s)));
    const int64_t rows = n * (n + 1) / 2;
    TCHECK(h.shape() == (TensorShape{rows, 3}));
    TCHECK(h.output().size() == static_cast<size_t>(rows * 3 * 4));
    const auto* p = reinterpret_cast<const int32_t*>(h.output().data());
    int64_t i = 0;
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < 3 * (r + 1); ++k) TCHECK(p[i++] == r);
    }
  }
  // Broadcast from the last rank.
  {
    std::vector<double> t(7, rank == n - 1 ? 42.0 : -1.0);
    ClientHandle h =
        Must(client->Broadcast(t.data(), DataType::kFloat64, {7}, {.name = "bc", .root = n - 1}));
    TOK(h.Wait(Deadline::After(10s)));
    for (double v : t) TCHECK(v == 42.0);
  }
  // Mismatched shapes: an error naming the tensor, and the next op still works.
  {
    std::vector<float> in(rank + 2, 1.0f), out(rank + 2);
    ClientHandle h = Must(client->Allreduce(in.data(), out.data(), DataType::kFloat32, {rank + 2},
                                            {.name = "mismatched_tensor"}));
    Status s = h.Wait(Deadline::After(10s));
    TCHECK(!s.ok());
    if (s.message().find("mismatched_tensor") == std::string::npos) {
      std::fprintf(stderr, "error does not name the tensor: %s\n", s.ToString().c_str());
      std::_Exit(1);
    }
    std::vector<float> a(5, 1.0f), b(5);
    ClientHandle h2 =
        Must(client->Allreduce(a.data(), b.data(), DataType::kFloat32, {5}, {.name = "after"}));
    TOK(h2.Wait(Deadline::After(10s)));
    for (float v : b) TCHECK(v == static_cast<float>(n));
  }
  // Alltoall: rank r sends j+1 rows of 2 to rank j.
  {
    std::vector<int64_t> splits;
    std::vector<int32_t> in;
    for (int j = 0; j < n; ++j) {
      splits.push_back(j + 1);
      for (int k = 0; k < 2 * (j + 1); ++k) in.push_back(rank * 100 + j);
    }
    const int64_t rows = n * (n + 1) / 2;
    ClientHandle h =
        Must(client->Alltoall(in.data(), DataType::kInt32, {rows, 2}, splits, {.name = "a2a"}));
    TOK(h.Wait(Deadline::After(10s)));
    TCHECK(h.shape() == (TensorShape{n * (rank + 1), 2}));
    TCHECK(h.received_splits() == std::vector<int64_t>(n, rank + 1));
    const auto* p = reinterpret_cast<const int32_t*>(h.output().data());
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 2 * (rank + 1); ++k) TCHECK(*p++ == i * 100 + rank);
    }
  }
  // Reducescatter: 2 rows of 3 per rank.
  {
    std::vector<float> in(2 * n * 3, static_cast<float>(rank + 1));
    ClientHandle h =
        Must(client->ReduceScatter(in.data(), DataType::kFloat32, {2 * n, 3}, {.name = "rs"}));
    TOK(h.Wait(Deadline::After(10s)));
    TCHECK(h.shape() == (TensorShape{2, 3}));
    TCHECK(h.output().size() == 6 * sizeof(float));
    const auto* p = reinterpret_cast<const float*>(h.output().data());
    for (int i = 0; i < 6; ++i) TCHECK(p[i] == tri);
  }
  // Control plane: process sets, the timeline on and off.
  {
    // A set of every rank duplicates the world: refused on every rank, as Horovod does.
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    StatusOr<int> dup = client->AddProcessSet(all);
    TCHECK(!dup.ok() && dup.status().message().find("already exists") != std::string::npos);
    // {0} and {1..n-1}; a reducescatter on this rank's set splits over the set (the first set
    // ranks get one more row); then both sets go.
    std::vector<int> high;
    for (int r = 1; r < n; ++r) high.push_back(r);
    const int low_id = Must(client->AddProcessSet({0}));
    const int high_id = Must(client->AddProcessSet(high));
    TCHECK(low_id > 0 && high_id > low_id);
    const int m = rank == 0 ? 1 : n - 1;
    const int pos = rank == 0 ? 0 : rank - 1;
    float set_sum = 0;
    for (int r = (rank == 0 ? 0 : 1); r < (rank == 0 ? 1 : n); ++r) set_sum += r + 1.0f;
    std::vector<float> in((2 * m + 1) * 3, static_cast<float>(rank + 1));
    ClientHandle h = Must(
        client->ReduceScatter(in.data(), DataType::kFloat32, {2 * m + 1, 3},
                              {.name = "rs_in_set", .process_set = rank == 0 ? low_id : high_id}));
    TOK(h.Wait(Deadline::After(10s)));
    const int64_t rows = 2 + (pos == 0 ? 1 : 0);
    TCHECK(h.shape() == (TensorShape{rows, 3}));
    TCHECK(h.output().size() == static_cast<size_t>(rows * 3) * sizeof(float));
    const auto* rs = reinterpret_cast<const float*>(h.output().data());
    for (int i = 0; i < rows * 3; ++i) TCHECK(rs[i] == set_sum);
    TCHECK(Must(client->RemoveProcessSet(high_id)));
    TCHECK(!Must(client->RemoveProcessSet(high_id)));  // already gone
    TCHECK(!Must(client->RemoveProcessSet(0)));        // the world stays
    TCHECK(Must(client->RemoveProcessSet(low_id)));
    std::vector<float> x(2, 1.0f), y(2);
    StatusOr<ClientHandle> gone = client->Allreduce(x.data(), y.data(), DataType::kFloat32, {2},
                                                    {.name = "on_removed", .process_set = high_id});
    Status gs = gone.ok() ? gone->Wait(Deadline::After(10s)) : gone.status();
    TCHECK(!gs.ok() && gs.message().find("process set") != std::string::npos);
    // The same ranks can be registered again, under a new id.
    TCHECK(Must(client->AddProcessSet(high)) > high_id);
    const std::string tl = "/tmp/kvsd-timeline-" + std::to_string(::getppid()) + "-{rank}.json";
    TOK(client->StartTimeline(tl));
    TOK(client->StopTimeline());
    const std::string mine =
        "/tmp/kvsd-timeline-" + std::to_string(::getppid()) + "-" + std::to_string(rank) + ".json";
    ::unlink(mine.c_str());
  }
  // Join on every rank.
  {
    ClientHandle h = Must(client->Join({.name = "join"}));
    TOK(h.Wait(Deadline::After(10s)));
    TCHECK(h.last_joined_rank() >= 0 && h.last_joined_rank() < n);
  }
  // Barrier, and the stats move.
  {
    ClientHandle h = Must(client->Barrier({.name = "barrier"}));
    TOK(h.Wait(Deadline::After(10s)));
    EngineStats stats = Must(client->GetStats());
    TCHECK(stats.tensors >= 5);
  }
}

TEST(SidecarDaemonTest, TwoRanksRunCollectives) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) { RunOps(r, job.socket(r)); }));
  int status = 0;
  EXPECT_NE(HttpGet(job.metrics_port(0), "/healthz", &status).find("ok"), std::string::npos);
  EXPECT_EQ(status, 200);
  HttpGet(job.metrics_port(1), "/readyz", &status);
  EXPECT_EQ(status, 200);
  const std::string metrics = HttpGet(job.metrics_port(0), "/metrics", &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(metrics.find("korovod_ops_total{collective=\"allreduce\"} "), std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("korovod_ops_total{collective=\"allreduce\"} 0"), std::string::npos);
}

TEST(SidecarDaemonTest, FourRanksRunCollectives) {
  Job job(4);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) { RunOps(r, job.socket(r)); }));
}

// Threads that Wait on their handles pop the completions themselves (no hop through the client's
// completion thread), one at a time, for each other too; a thread that only Polls is served by the
// completion thread once the waiters are gone. Nothing is lost and every result is right.
TEST(SidecarDaemonTest, ConcurrentWaitersAndAPollerAllComplete) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    constexpr int kThreads = 4, kOps = 100;
    std::atomic<int> wrong{0}, failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<float> in(64 + t, static_cast<float>(rank + 1)), out(in.size());
        for (int i = 0; i < kOps; ++i) {
          auto h = client->Allreduce(in.data(), out.data(), DataType::kFloat32,
                                     {static_cast<int64_t>(in.size())},
                                     {.name = "t" + std::to_string(t)});
          if (!h.ok() || !h->Wait(Deadline::After(30s)).ok()) {
            ++failed;
            return;
          }
          if (out[0] != 3.0f || out.back() != 3.0f) ++wrong;
        }
      });
    }
    // The poller: submits, then only polls until its op completes (deadline 30 s).
    std::vector<float> in(32, static_cast<float>(rank + 1)), out(32);
    for (int i = 0; i < 20; ++i) {
      auto h =
          client->Allreduce(in.data(), out.data(), DataType::kFloat32, {32}, {.name = "poller"});
      TCHECK(h.ok());
      const Deadline d = Deadline::After(30s);
      while (!h->Poll() && !d.Expired()) std::this_thread::sleep_for(1ms);
      TCHECK(h->Poll());
      TOK(h->Wait(Deadline::After(1s)));
      TCHECK(out[0] == 3.0f);
    }
    for (auto& th : threads) th.join();
    TCHECK(failed.load() == 0);
    TCHECK(wrong.load() == 0);
  }));
}

TEST(SidecarDaemonTest, SurvivesAClientThatDiesMidStream) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  // Rank 1's trainer dies without detaching (op in flight); rank 0's exits cleanly.
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    std::vector<float> a(16, 1.0f), b(16);
    ClientHandle h =
        Must(client->Allreduce(a.data(), b.data(), DataType::kFloat32, {16}, {.name = "first"}));
    TOK(h.Wait(Deadline::After(10s)));
    if (r == 0) {
      // One client per arena: a second is refused with a clear error.
      auto second = Client::Connect(job.socket(r), 5s);
      TCHECK(!second.ok());
      TCHECK(second.status().message().find("already has a client") != std::string::npos);
    }
    if (r == 1) {
      (void)Must(
          client->Allreduce(a.data(), b.data(), DataType::kFloat32, {16}, {.name = "orphan"}));
      std::_Exit(0);  // no destructors: the arena still says attached
    }
  }));
  // A trainer that dies right after attaching (before the sidecar's liveness check saw it).
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    if (r == 1) {
      auto client = Must(Client::Connect(job.socket(r), 10s));
      std::_Exit(0);
    }
  }));
  // New trainers attach to the same sidecars and work.
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    std::vector<float> a(16, 2.0f), b(16);
    ClientHandle h =
        Must(client->Allreduce(a.data(), b.data(), DataType::kFloat32, {16}, {.name = "again"}));
    TOK(h.Wait(Deadline::After(10s)));
    for (float v : b) TCHECK(v == 4.0f);
  }));
  int status = 0;
  HttpGet(job.metrics_port(1), "/healthz", &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(job.Log(1).find("arena reset"), std::string::npos) << job.Log(1);
}

TEST(SidecarDaemonTest, ShutdownRpcStopsTheSidecar) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    ClientHandle h = Must(client->Barrier({.name = "before_shutdown"}));
    TOK(h.Wait(Deadline::After(10s)));
    if (r == 0) TOK(client->Shutdown("test"));
  }));
  EXPECT_TRUE(job.ExitsCleanly(0, 10s)) << job.Log(0);
  struct stat sb {};
  EXPECT_NE(::stat(job.socket(0).c_str(), &sb), 0);
}

// A trainer that asks for shutdown with ops still in flight gets each of them answered by the
// sidecar (Aborted, naming the shutdown) before the sidecar goes, and its peer's op in flight
// fails the same way; nobody hangs or learns it only from the sidecar's disappearance.
TEST(SidecarDaemonTest, ShutdownRpcAnswersOpsInFlight) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    TOK(Must(client->Barrier({.name = "start"})).Wait(Deadline::After(10s)));
    std::vector<float> a(8, 1.0f), b(8);
    // Never matched by the other rank: in flight until the engine stops.
    ClientHandle h = Must(client->Allreduce(a.data(), b.data(), DataType::kFloat32, {8},
                                            {.name = "only_rank" + std::to_string(r)}));
    std::vector<ClientHandle> more;
    if (r == 0) {
      for (int i = 0; i < 16; ++i) {
        more.push_back(Must(client->Allreduce(a.data(), b.data(), DataType::kFloat32, {8},
                                              {.name = "burst" + std::to_string(i)})));
      }
      TOK(client->Shutdown("test with ops in flight"));
    }
    more.push_back(h);
    for (ClientHandle& op : more) {
      const Status s = op.Wait(Deadline::After(20s));
      TCHECK(s.code() == StatusCode::kAborted);
      TCONTAINS(s.message(), "shut down");
    }
  }));
  EXPECT_TRUE(job.ExitsCleanly(0, 10s)) << job.Log(0);
}

// The end of a job is no error: when rank 0's trainer shuts down while rank 1 still runs, rank 1's
// op fails naming the shutdown and its sidecar says so at INFO, with no WARNING or ERROR line.
TEST(SidecarDaemonTest, AnotherRanksShutdownIsAnOrderlyEnd) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    TOK(Must(client->Barrier({.name = "start"})).Wait(Deadline::After(10s)));
    if (r == 0) {
      TOK(client->Shutdown("the job is done"));
      return;
    }
    std::vector<float> a(8, 1.0f), b(8);
    const Status s = Must(client->Allreduce(a.data(), b.data(), DataType::kFloat32, {8},
                                            {.name = "after_rank0_left"}))
                         .Wait(Deadline::After(20s));
    TCHECK(s.code() == StatusCode::kAborted);
    TCONTAINS(s.message(), "shut down by rank 0");
  }));
  EXPECT_TRUE(job.ExitsCleanly(0, 10s)) << job.Log(0);
  const std::string said =
      "INFO [rank 1] engine: engine shut down: the engine was shut down by rank 0";
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (job.Log(1).find(said) == std::string::npos && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
  }
  const std::string log = job.Log(1);
  EXPECT_NE(log.find(said), std::string::npos) << log;
  EXPECT_EQ(log.find(" ERROR "), std::string::npos) << log;
  EXPECT_EQ(log.find(" WARNING "), std::string::npos) << log;
}

// A valid korovodrun-style sidecar environment plus `extra` (which wins).
StatusOr<SidecarConfig> ValidConfigWith(std::map<std::string, std::string> extra) {
  const std::map<std::string, std::string> base = {{"KOROVOD_SIZE", "2"},
                                                   {"KOROVOD_RANK", "1"},
                                                   {"KOROVOD_PEERS", "127.0.0.1:1,127.0.0.1:2"},
                                                   {"KOROVOD_SOCKET", "/tmp/x.sock"},
                                                   {"KOROVOD_SHM_PREFIX", "/korovod-j-"}};
  extra.insert(base.begin(), base.end());
  if (!extra.count("KOROVOD_JOB_KEY") && !extra.count("KOROVOD_INSECURE_NO_KEY")) {
    extra.emplace("KOROVOD_JOB_KEY_FILE", "/k");
  }
  return SidecarConfig::FromEnvironment(
      [extra](const std::string& name) -> std::optional<std::string> {
        auto it = extra.find(name);
        if (it == extra.end()) return std::nullopt;
        return it->second;
      });
}

TEST(SidecarConfigTest, ErrorsNameTheVariable) {
  auto env = [](std::vector<std::pair<std::string, std::string>> kv) {
    return [kv](const std::string& name) -> std::optional<std::string> {
      for (auto& [k, v] : kv) {
        if (k == name) return v;
      }
      return std::nullopt;
    };
  };
  auto missing = SidecarConfig::FromEnvironment(env({{"KOROVOD_SIZE", "2"}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("KOROVOD_RANK"), std::string::npos);
  auto bad = SidecarConfig::FromEnvironment(env({{"KOROVOD_SIZE", "2"}, {"KOROVOD_RANK", "5"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("KOROVOD_RANK=5"), std::string::npos);
  auto peers = SidecarConfig::FromEnvironment(
      env({{"KOROVOD_SIZE", "2"}, {"KOROVOD_RANK", "0"}, {"KOROVOD_PEERS", "127.0.0.1:1"}}));
  ASSERT_FALSE(peers.ok());
  EXPECT_NE(peers.status().message().find("KOROVOD_PEERS"), std::string::npos);
  auto ok = SidecarConfig::FromEnvironment(env({{"KOROVOD_SIZE", "2"},
                                                {"KOROVOD_RANK", "1"},
                                                {"KOROVOD_PEERS", "127.0.0.1:1,127.0.0.1:2"},
                                                {"KOROVOD_SOCKET", "/tmp/x.sock"},
                                                {"KOROVOD_SHM_PREFIX", "/korovod-j-"},
                                                {"KOROVOD_INSECURE_NO_KEY", "1"}}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->arena_name(), "/korovod-j-rank1");
  EXPECT_EQ(ok->peers[1].port, 2);
  EXPECT_TRUE(ok->job_key.empty());
}

TEST(SidecarConfigTest, HostsNameOneHostPerRank) {
  const auto with = ValidConfigWith;
  auto none = with({});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->hosts.empty());
  auto two = with({{"KOROVOD_HOSTS", "localhost, 127.0.0.2"}});
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->hosts, (std::vector<std::string>{"localhost", "127.0.0.2"}));
  auto short_list = with({{"KOROVOD_HOSTS", "localhost"}});
  ASSERT_FALSE(short_list.ok());
  EXPECT_NE(short_list.status().message().find("KOROVOD_HOSTS names 1 hosts but KOROVOD_SIZE is 2"),
            std::string::npos)
      << short_list.status().ToString();
}

TEST(SidecarConfigTest, ArenaHeapSizes) {
  const auto with = ValidConfigWith;
  auto defaults = with({});
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->arena_heap_mib, 64);
  EXPECT_EQ(defaults->arena_heap_max_mib, 16384);
  auto set = with({{"KOROVOD_ARENA_HEAP_MIB", "8"}, {"KOROVOD_ARENA_HEAP_MAX_MIB", "16"}});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->arena_heap_mib, 8);
  EXPECT_EQ(set->arena_heap_max_mib, 16);
  auto inverted = with({{"KOROVOD_ARENA_HEAP_MIB", "128"}, {"KOROVOD_ARENA_HEAP_MAX_MIB", "16"}});
  ASSERT_FALSE(inverted.ok());
  EXPECT_NE(inverted.status().message().find(
                "KOROVOD_ARENA_HEAP_MIB=128 is more than KOROVOD_ARENA_HEAP_MAX_MIB=16"),
            std::string::npos)
      << inverted.status().message();
  auto zero = with({{"KOROVOD_ARENA_HEAP_MAX_MIB", "0"}});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("KOROVOD_ARENA_HEAP_MAX_MIB"), std::string::npos);
}

TEST(SidecarConfigTest, JobKeyFromTheEnvironment) {
  const auto with = ValidConfigWith;
  const std::string key(64, 'a');
  auto ok = with({{"KOROVOD_JOB_KEY", key}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->job_key, key);
  auto both = with({{"KOROVOD_JOB_KEY", key}, {"KOROVOD_JOB_KEY_FILE", "/k"}});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("both KOROVOD_JOB_KEY and KOROVOD_JOB_KEY_FILE"),
            std::string::npos);
  auto short_key = with({{"KOROVOD_JOB_KEY", "abc"}});
  ASSERT_FALSE(short_key.ok());
  EXPECT_NE(short_key.status().message().find("at least 32"), std::string::npos);
}

// Issue 30: a sidecar without a key refuses to start, naming both settings; the insecure mode
// is an explicit choice that excludes a key.
TEST(SidecarConfigTest, AJobKeyIsRequired) {
  auto none = ValidConfigWith({{"KOROVOD_INSECURE_NO_KEY", "0"}});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no job key: set KOROVOD_JOB_KEY_FILE"),
            std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("or KOROVOD_JOB_KEY;"), std::string::npos);
  auto insecure = ValidConfigWith({{"KOROVOD_INSECURE_NO_KEY", "1"}});
  ASSERT_TRUE(insecure.ok()) << insecure.status().ToString();
  EXPECT_TRUE(insecure->insecure_no_key);
  auto both =
      ValidConfigWith({{"KOROVOD_INSECURE_NO_KEY", "1"}, {"KOROVOD_JOB_KEY", std::string(64, 'k')}});
  EXPECT_FALSE(both.ok());
}

}  // namespace
}  // namespace korovod::sidecar
