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
int RunRank(int rank, const std::vector<PeerAddress>& peers, int listen_fd, int victim) {
  WorldOptions w;
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
  auto engine = Engine::Start(std::move(*comm), cfg);
  if (!engine.ok()) return 3;
  std::vector<float> in(100000, 1.0f), out(100000);
  for (int step = 0; step < 1000; ++step) {
    if (rank == victim && step == 5) ::kill(::getpid(), SIGKILL);
    OpRequest r;
    r.name = "grad";
    r.shape = {100000};
    r.input = in.data();
    r.output = out.data();
    auto h = (*engine)->Submit(r);
    Status s = h.ok() ? h->Wait(Deadline::After(60s)) : h.status();
    if (s.ok()) continue;
    const std::string want =
        "rank " + std::to_string(victim) + " (" + peers[victim].ToString() + ")";
    if (s.message().find(want) == std::string::npos) {
      std::fprintf(stderr, "rank %d: error does not name %s: %s\n", rank, want.c_str(),
                   s.ToString().c_str());
      return 4;
    }
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

TEST(EngineFailure, KilledRankIsNamedOnEverySurvivor) {
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
      ::_exit(RunRank(r, peers, fds[r], kVictim));
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

}  // namespace
}  // namespace korovod::testing
