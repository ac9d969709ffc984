// A rank dies in the middle of training: every surviving rank's in-flight and later ops fail
// with an error naming the dead rank and its address, instead of hanging. Ranks are forked
// processes (a thread cannot be killed), started before this binary creates any thread.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "runtime/core/engine.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {
namespace {

using namespace std::chrono_literals;

// Child body: returns the process exit code. 0: saw the expected failure.
int RunRank(int rank, const std::vector<PeerAddress>& peers, int listen_fd, int victim, int lanes) {
  WorldOptions w;
  w.collective_lanes = lanes;
  w.rank = rank;
  w.peers = peers;
  w.listen_fd = listen_fd;
  w.job_key = "failure-test";
  w.transport = TransportKind::kTcp;
  w.op_timeout = 30000ms;
  auto comm = Communicator::Create(w);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: create: %s\n", rank, comm.status().ToString().c_str());
    return 2;
  }
  EngineConfig cfg;
  cfg.stall_check = 0ms;
  cfg.collective_lanes = lanes;
  auto engine = Engine::Start(std::move(*comm), cfg);
  if (!engine.ok()) return 3;
  // Four tensors in flight per step: with lanes, several collectives are running when the
  // victim dies, and every one of them must fail naming it.
  constexpr int kInFlight = 4;
  std::vector<float> in(100000, 1.0f);
  std::vector<std::vector<float>> out(kInFlight, std::vector<float>(100000));
  const std::string want = "rank " + std::to_string(victim) + " (" + peers[victim].ToString() + ")";
  for (int step = 0; step < 1000; ++step) {
    if (rank == victim && step == 5) ::kill(::getpid(), SIGKILL);
    std::vector<StatusOr<OpHandle>> handles;
    OpRequest r;
    for (int k = 0; k < kInFlight; ++k) {
      r.name = "grad." + std::to_string(k);
      r.shape = {100000};
      r.input = in.data();
      r.output = out[k].data();
      handles.push_back((*engine)->Submit(r));
    }
    int failed = 0;
    for (auto& h : handles) {
      Status s = h.ok() ? h->Wait(Deadline::After(60s)) : h.status();
      if (s.ok()) continue;
      ++failed;
      if (s.message().find(want) == std::string::npos) {
        std::fprintf(stderr, "rank %d: error does not name %s: %s\n", rank, want.c_str(),
                     s.ToString().c_str());
        return 4;
      }
    }
    if (failed == 0) continue;
    // Later ops fail at once with the same cause, and health says why.
    auto again = (*engine)->Submit(r);
    if (again.ok() || (*engine)->health().message().find(want) == std::string::npos) {
      std::fprintf(stderr, "rank %d: engine still accepts ops after the failure\n", rank);
      return 5;
    }
    return 0;
  }
  std::fprintf(stderr, "rank %d: no failure seen\n", rank);
  return 6;
}

// One collective at a time on the engine thread (lanes 1), or several on collective lanes whose
// connections share the mesh's control connections (the default over TCP).
class EngineFailure : public ::testing::TestWithParam<int> {};

TEST_P(EngineFailure, KilledRankIsNamedOnEverySurvivor) {
  const int lanes = GetParam();
  constexpr int kSize = 4;
  constexpr int kVictim = 2;
  std::vector<int> fds(kSize);
  std::vector<PeerAddress> peers(kSize);
  for (int r = 0; r < kSize; ++r) {
    uint16_t port = 0;
    fds[r] = ListenLoopback(&port);
    peers[r] = {"127.0.0.1", port};
  }
  std::vector<pid_t> pids(kSize);
  for (int r = 0; r < kSize; ++r) {
    pids[r] = ::fork();
    ASSERT_GE(pids[r], 0);
    if (pids[r] == 0) {
      for (int o = 0; o < kSize; ++o) {
        if (o != r) ::close(fds[o]);
      }
      ::alarm(120);  // a hang fails the test instead of blocking CI
      ::_exit(RunRank(r, peers, fds[r], kVictim, lanes));
    }
  }
  for (int fd : fds) ::close(fd);
  for (int r = 0; r < kSize; ++r) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[r], &status, 0), pids[r]);
    if (r == kVictim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "victim status " << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << "rank " << r << " status " << status << " (see its stderr above)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Lanes, EngineFailure, ::testing::Values(1, 2),
                         [](const auto& info) { return "lanes" + std::to_string(info.param); });

}  // namespace
}  // namespace korovod::testing
