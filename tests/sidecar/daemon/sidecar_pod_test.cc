// One sidecar serving several ranks (KOROVOD_SIDECAR_RANKS), as in a pod of several GPUs: each
// rank has its own socket, arena and engine in one process; trainers see their own rank, local
// rank and cross rank; collectives are exact within and across such sidecars (hierarchical when
// each sidecar is a host); a trainer's Shutdown ends only its own rank; SIGTERM ends all of them
// cleanly (the Job's destructor checks exit 0, no socket and nothing in /dev/shm left).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "sidecar/client/client.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;
using daemon_test::Job;
using daemon_test::Must;

// Every collective the test checks, from rank r's trainer.
void Collectives(Client& client) {
  const int r = client.rank(), n = client.size();
  std::vector<float> in(300000), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1 + i % 5);
  auto h = Must(client.Allreduce(in.data(), out.data(), DataType::kFloat32,
                                 {static_cast<int64_t>(in.size())}, {.name = "big"}));
  TOK(h.Wait(Deadline::After(30s)));
  for (size_t i = 0; i < out.size(); i += 997) {
    TCHECK(out[i] == static_cast<float>(n * (n + 1) / 2 + n * (i % 5)));
  }
  std::vector<int32_t> b(1000, r == 2 ? 7 : 0);
  auto hb = Must(client.Broadcast(b.data(), DataType::kInt32, {1000}, {.name = "b", .root = 2}));
  TOK(hb.Wait(Deadline::After(30s)));
  for (int32_t v : b) TCHECK(v == 7);
  std::vector<int64_t> g(static_cast<size_t>(r + 1), r);
  auto hg = Must(client.Allgather(g.data(), DataType::kInt64, {r + 1}, {.name = "g"}));
  TOK(hg.Wait(Deadline::After(30s)));
  const auto bytes = hg.output();
  TCHECK(bytes.size() == sizeof(int64_t) * static_cast<size_t>(n * (n + 1) / 2));
  const auto* all = reinterpret_cast<const int64_t*>(bytes.data());
  for (int k = 0, at = 0; k < n; ++k) {
    for (int i = 0; i <= k; ++i) TCHECK(all[at++] == k);
  }
}

TEST(SidecarPod, TwoSidecarsOfTwoRanksAreTwoHostsAndRunHierarchically) {
  Job job(4, {"KOROVOD_HOSTS=pod0,pod0,pod1,pod1"}, 2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    TCHECK(client->rank() == r);
    TCHECK(client->size() == 4);
    TCHECK(client->local_rank() == r % 2);
    TCHECK(client->local_size() == 2);
    TCHECK(client->cross_rank() == r / 2);
    TCHECK(client->cross_size() == 2);
    Collectives(*client);
  }));
  for (int s = 0; s < 2; ++s) {
    const std::string log = job.Log(s);
    EXPECT_NE(log.find("[ranks " + std::to_string(2 * s) + "-" + std::to_string(2 * s + 1) + "]"),
              std::string::npos)
        << log;
    for (int r = 2 * s; r < 2 * s + 2; ++r) {
      EXPECT_NE(log.find("korovod: rank " + std::to_string(r) + "/4 host pod" + std::to_string(s)),
                std::string::npos)
          << log;
    }
    EXPECT_NE(log.find("allreduce hierarchical (2 hosts x 2 ranks)"), std::string::npos) << log;
  }
}

TEST(SidecarPod, OneSidecarServesAWholeWorldOverSharedMemory) {
  Job job(3, {}, 3);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    TCHECK(client->rank() == r);
    TCHECK(client->local_rank() == r);
    TCHECK(client->local_size() == 3);
    std::vector<double> v(1000, r + 1.0), out(1000);
    auto h = Must(client->Allreduce(v.data(), out.data(), DataType::kFloat64, {1000}, {}));
    TOK(h.Wait(Deadline::After(30s)));
    for (double x : out) TCHECK(x == 6.0);
  }));
  EXPECT_NE(job.Log(0).find("transport shm"), std::string::npos) << job.Log(0);
}

TEST(SidecarPod, ATrainersShutdownEndsOnlyItsRankAndTheProcessEndsWithTheLast) {
  Job job(2, {}, 2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    std::vector<float> v(10, 1.0f), out(10);
    auto h = Must(client->Allreduce(v.data(), out.data(), DataType::kFloat32, {10}, {}));
    TOK(h.Wait(Deadline::After(30s)));
    if (r == 1) {
      // Rank 0 has asked its engine to stop by now: rank 1 is still served.
      std::this_thread::sleep_for(1s);
      Must(client->GetStats());
    }
    TOK(client->Shutdown("rank done"));
  }));
  EXPECT_TRUE(job.ExitsCleanly(0, 20s)) << job.Log(0);
  EXPECT_NE(job.Log(0).find("shutdown requested by the trainer: rank done"), std::string::npos);
}

TEST(SidecarPod, BadSettingsNameTheVariable) {
  struct Case {
    std::vector<std::string> env;
    std::string message;
  };
  char dir_template[] = "/tmp/kvpod-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::vector<std::string> base = {"KOROVOD_SIZE=4", "KOROVOD_RANK=0",
                                         "KOROVOD_PEERS=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,"
                                         "127.0.0.1:4",
                                         "KOROVOD_SHM_PREFIX=/kvpodtest-", "PATH=/usr/bin:/bin"};
  for (const Case& c : std::vector<Case>{
           {{"KOROVOD_SIDECAR_RANKS=2", "KOROVOD_SOCKET=" + dir + "/one.sock"},
            "must contain \"{local_rank}\""},
           {{"KOROVOD_SIDECAR_RANKS=5", "KOROVOD_SOCKET=" + dir + "/r{local_rank}.sock"},
            "KOROVOD_SIDECAR_RANKS=5 from KOROVOD_RANK=0 goes past KOROVOD_SIZE=4"},
           {{"KOROVOD_SIDECAR_RANKS=2", "KOROVOD_SOCKET=" + dir + "/r{local_rank}.sock",
             "KOROVOD_LISTEN_FD=0"},
            "names 1 descriptors for 2 ranks"},
       }) {
    std::vector<std::string> env = base;
    env.insert(env.end(), c.env.begin(), c.env.end());
    const std::string log = dir + "/log";
    const int st = daemon_test::RunToExit(daemon_test::SidecarBinary(), env, log, 10s);
    ASSERT_NE(st, -1) << "the sidecar did not exit";
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(c.message), std::string::npos) << text;
  }
  (void)!std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace korovod::sidecar
