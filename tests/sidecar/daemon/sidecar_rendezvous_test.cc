// korovod-sidecar without KOROVOD_PEERS: real sidecar processes find each other through the
// rendezvous coordinator (KOROVOD_COORDINATOR) or a world file (KOROVOD_WORLD_FILE), run the
// preflight and the link probe, print the start-up summary line and export the measured link
// bandwidth on /metrics; korovod-test-trainer processes run ops through them. Start-up failures
// (unknown KOROVOD_IFACE, absent coordinator) end the sidecar with an error naming the cause.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sidecar/daemon/sidecar_config.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar {
namespace {

using daemon_test::FreePort;
using daemon_test::ReportedMetricsPort;

std::string HttpGet(int port, const std::string& path) {
  int status = 0;
  return daemon_test::HttpGet(port, path, &status);
}

using namespace std::chrono_literals;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool WaitPid(pid_t pid, std::chrono::milliseconds timeout, int* st) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (::waitpid(pid, st, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

pid_t Spawn(const char* binary, const std::vector<std::string>& env, const std::string& log) {
  std::vector<std::string> copy = env;
  std::vector<char*> envp;
  for (auto& e : copy) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(binary), nullptr};
  pid_t pid = ::fork();
  if (pid == 0) {
    int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(logfd, 1);
    ::dup2(logfd, 2);
    ::execve(argv[0], argv, envp.data());
    std::_Exit(127);
  }
  return pid;
}

// N sidecars on this host, told where the peers are by `placement` (KOROVOD_COORDINATOR=... or
// KOROVOD_WORLD_FILE=...), each rank's extra variables from `extra(rank)`.
class Job {
 public:
  Job(int n, const std::function<std::vector<std::string>(int)>& extra) : n_(n) {
    char tmpl[] = "/tmp/kvrdv-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    prefix_ = "/kvrdvtest-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++) + "-";
    const std::string key = dir_ + "/job.key";
    {
      std::ofstream k(key);
      k << std::string(64, 'b') << "\n";
    }
    ::chmod(key.c_str(), 0600);
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> env = {
          "KOROVOD_RANK=" + std::to_string(r),
          "KOROVOD_SIZE=" + std::to_string(n),
          "KOROVOD_JOB_KEY_FILE=" + key,
          "KOROVOD_SOCKET=" + socket(r),
          "KOROVOD_SHM_PREFIX=" + prefix_,
          "KOROVOD_METRICS_PORT=0",
          "KOROVOD_START_TIMEOUT_SECONDS=20",
          "KOROVOD_ARENA_HEAP_MIB=16",
          "PATH=/usr/bin:/bin",
      };
      for (const std::string& e : extra(r)) {  // a rank's own value replaces the default
        const std::string key = e.substr(0, e.find('=') + 1);
        std::erase_if(env, [&](const std::string& d) { return d.rfind(key, 0) == 0; });
        env.push_back(e);
      }
      pids_.push_back(Spawn(KOROVOD_SIDECAR_BIN, env, log(r)));
    }
  }
  ~Job() {
    for (pid_t p : pids_) {
      if (p > 0) ::kill(p, SIGTERM);
    }
    for (pid_t p : pids_) {
      int st = 0;
      if (p > 0 && !WaitPid(p, 10s, &st)) {
        ::kill(p, SIGKILL);
        ::waitpid(p, &st, 0);
      }
    }
    (void)!std::system(("rm -rf " + dir_).c_str());
  }

  ::testing::AssertionResult WaitReady() {
    const auto end = std::chrono::steady_clock::now() + 30s;
    for (int r = 0; r < n_; ++r) {
      struct stat sb {};
      while (::stat(socket(r).c_str(), &sb) != 0) {
        int st = 0;
        if (::waitpid(pids_[r], &st, WNOHANG) == pids_[r]) {
          pids_[r] = -1;
          return ::testing::AssertionFailure() << "sidecar " << r << " exited: " << Log(r);
        }
        if (std::chrono::steady_clock::now() > end) {
          return ::testing::AssertionFailure() << "sidecar " << r << " not ready: " << Log(r);
        }
        std::this_thread::sleep_for(10ms);
      }
    }
    return ::testing::AssertionSuccess();
  }

  // One korovod-test-trainer per rank; success when all print "ok" and exit 0.
  ::testing::AssertionResult RunTrainers() {
    std::vector<pid_t> kids;
    for (int r = 0; r < n_; ++r) {
      kids.push_back(Spawn(KOROVOD_TRAINER_BIN, {"KOROVOD_SOCKET=" + socket(r)}, trainer_log(r)));
    }
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    for (int r = 0; r < n_; ++r) {
      int st = 0;
      if (!WaitPid(kids[r], 60s, &st)) {
        ::kill(kids[r], SIGKILL);
        ::waitpid(kids[r], &st, 0);
      }
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        result = ::testing::AssertionFailure()
                 << "trainer " << r << " status " << st << ": " << Read(trainer_log(r)) << "\n"
                 << Log(r);
      }
    }
    return result;
  }

  // Waits for sidecar r to exit by itself; its exit code, or -1.
  int ExitCode(int r, std::chrono::milliseconds timeout) {
    int st = 0;
    if (!WaitPid(pids_[r], timeout, &st)) return -1;
    pids_[r] = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  std::string dir() const { return dir_; }
  int metrics_port(int r) const { return ReportedMetricsPort(log(r), r, n_); }
  std::string Log(int r) const { return Read(log(r)); }

 private:
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string socket(int r) const { return dir_ + "/rank" + std::to_string(r) + ".sock"; }
  std::string log(int r) const { return dir_ + "/rank" + std::to_string(r) + ".log"; }
  std::string trainer_log(int r) const { return dir_ + "/trainer" + std::to_string(r) + ".log"; }

  static inline int counter_ = 0;
  int n_;
  std::string dir_;
  std::string prefix_;
  std::vector<pid_t> pids_;
};

TEST(SidecarRendezvous, ThreeSidecarsMeetAtTheCoordinatorAndRunOps) {
  const std::string coordinator = "KOROVOD_COORDINATOR=127.0.0.1:" + std::to_string(FreePort());
  Job job(3, [&](int) { return std::vector<std::string>{coordinator}; });
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers());
  for (int r = 0; r < 3; ++r) {
    const std::string log = job.Log(r);
    // One summary line per rank: on one host the ranks meet over loopback.
    EXPECT_TRUE(Contains(log, "korovod: rank " + std::to_string(r) + "/3 host ")) << log;
    EXPECT_TRUE(Contains(log, " iface lo addr 127.0.0.1:")) << log;
    EXPECT_TRUE(Contains(log, "next rank " + std::to_string((r + 1) % 3))) << log;
    EXPECT_TRUE(Contains(log, " GB/s")) << log;
  }
  const std::string metrics = HttpGet(job.metrics_port(0), "/metrics");
  for (const char* peer : {"1", "2"}) {
    const std::string series =
        std::string("korovod_peer_link_bandwidth_bytes_per_second{peer_rank=\"") + peer + "\"} ";
    const size_t at = metrics.find(series);
    ASSERT_NE(at, std::string::npos) << metrics;
    EXPECT_GT(std::atof(metrics.c_str() + at + series.size()), 0.0) << metrics;
  }
}

TEST(SidecarRendezvous, TwoSidecarsFromAWorldFile) {
  const int p0 = FreePort(), p1 = FreePort();
  char tmpl[] = "/tmp/kvworld-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const std::string path = tmpl;
  {
    std::ofstream out(path);
    out << "rank=0 host=alpha port=" << p0 << " addr=lo/127.0.0.1 node=box\n"
        << "rank=1 host=beta port=" << p1 << " addr=lo/127.0.0.1 node=box\n";
  }
  {
    Job job(2, [&](int) { return std::vector<std::string>{"KOROVOD_WORLD_FILE=" + path}; });
    ASSERT_TRUE(job.WaitReady());
    EXPECT_TRUE(job.RunTrainers());
    EXPECT_TRUE(Contains(job.Log(0), "next rank 1 (beta) 127.0.0.1 (lo)")) << job.Log(0);
  }
  ::unlink(path.c_str());
}

TEST(SidecarRendezvous, AnUnknownKorovodIfaceStopsTheStartNamingIt) {
  const std::string coordinator = "KOROVOD_COORDINATOR=127.0.0.1:" + std::to_string(FreePort());
  Job job(2, [&](int) {
    return std::vector<std::string>{coordinator, "KOROVOD_IFACE=kvnosuchif0"};
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(job.ExitCode(r, 15s), 1) << job.Log(r);
    EXPECT_TRUE(Contains(job.Log(r), "KOROVOD_IFACE=kvnosuchif0: no such interface")) << job.Log(r);
    EXPECT_TRUE(Contains(job.Log(r), "lo 127.0.0.1")) << job.Log(r);
  }
}

TEST(SidecarRendezvous, AnAbsentCoordinatorFailsWithinTheStartTimeoutNamingIt) {
  const std::string where = "127.0.0.1:" + std::to_string(FreePort());
  Job job(2, [&](int r) {
    // Only rank 1 runs: rank 0, the coordinator, is given an impossible world file instead.
    return r == 1 ? std::vector<std::string>{"KOROVOD_COORDINATOR=" + where,
                                             "KOROVOD_START_TIMEOUT_SECONDS=2"}
                  : std::vector<std::string>{"KOROVOD_WORLD_FILE=/nonexistent/kv-world"};
  });
  EXPECT_EQ(job.ExitCode(0, 15s), 1) << job.Log(0);
  EXPECT_EQ(job.ExitCode(1, 30s), 1) << job.Log(1);
  const std::string log = job.Log(1);
  EXPECT_TRUE(Contains(log, "rank 1 (host ")) << log;
  EXPECT_TRUE(Contains(log, "could not reach the rendezvous coordinator (rank 0) at " + where))
      << log;
}

using Env = std::vector<std::pair<std::string, std::string>>;
StatusOr<SidecarConfig> Parse(const Env& kv) {
  Env all = {{"KOROVOD_SIZE", "2"},
             {"KOROVOD_RANK", "1"},
             {"KOROVOD_SOCKET", "/tmp/x.sock"},
             {"KOROVOD_SHM_PREFIX", "/korovod-j-"},
             {"KOROVOD_JOB_KEY_FILE", "/k"}};
  all.insert(all.end(), kv.begin(), kv.end());
  return SidecarConfig::FromEnvironment(
      [all](const std::string& name) -> std::optional<std::string> {
        for (auto& [k, v] : all) {
          if (k == name) return v;
        }
        return std::nullopt;
      });
}

TEST(SidecarConfigWorld, ExactlyOnePlacementVariable) {
  auto none = Parse({});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(),
                       "none of KOROVOD_PEERS, KOROVOD_COORDINATOR, KOROVOD_WORLD_FILE and "
                       "KOROVOD_ELASTIC_RENDEZVOUS"))
      << none.status().ToString();
  auto two = Parse({{"KOROVOD_COORDINATOR", "c:1"}, {"KOROVOD_WORLD_FILE", "/w"}});
  ASSERT_FALSE(two.ok());
  EXPECT_TRUE(Contains(two.status().message(), "more than one")) << two.status().ToString();
  auto bad = Parse({{"KOROVOD_COORDINATOR", "c"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "KOROVOD_COORDINATOR entry \"c\""))
      << bad.status().ToString();
  auto port = Parse({{"KOROVOD_COORDINATOR", "c:1"}, {"KOROVOD_DATA_PORT", "70000"}});
  ASSERT_FALSE(port.ok());
  EXPECT_TRUE(Contains(port.status().message(), "KOROVOD_DATA_PORT=70000"));
  auto ok = Parse({{"KOROVOD_COORDINATOR", "coord.job.svc:29400"},
                   {"KOROVOD_IFACE", "eth1"},
                   {"KOROVOD_DATA_PORT", "29500"}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_TRUE(ok->coordinator.has_value());
  EXPECT_EQ(ok->coordinator->ToString(), "coord.job.svc:29400");
  EXPECT_EQ(ok->iface, "eth1");
  EXPECT_EQ(ok->data_port, 29500);
  EXPECT_TRUE(ok->peers.empty());
  auto file = Parse({{"KOROVOD_WORLD_FILE", "/etc/korovod/world"}});
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->world_file, "/etc/korovod/world");
  EXPECT_EQ(file->epoch, 0u);  // korovodrun and injected pods set none
  auto epoch = Parse({{"KOROVOD_WORLD_FILE", "/w"}, {"KOROVOD_EPOCH", "7"}});
  ASSERT_TRUE(epoch.ok()) << epoch.status().ToString();
  EXPECT_EQ(epoch->epoch, 7u);
  auto bad_epoch = Parse({{"KOROVOD_WORLD_FILE", "/w"}, {"KOROVOD_EPOCH", "-1"}});
  ASSERT_FALSE(bad_epoch.ok());
  EXPECT_TRUE(Contains(bad_epoch.status().message(), "KOROVOD_EPOCH"))
      << bad_epoch.status().ToString();
  auto both = Parse({{"KOROVOD_WORLD_FILE", "/w"}, {"KOROVOD_ELASTIC_RENDEZVOUS", "127.0.0.1:5"}});
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(Contains(both.status().message(), "more than one")) << both.status().ToString();
}

// Elastic: the membership server places the worker; rank and size are optional (the epoch gives
// them), the arena is named by the worker (it outlives epochs), and a bad id or timeout is refused.
TEST(SidecarConfigWorld, ElasticWorker) {
  auto bare =
      SidecarConfig::FromEnvironment([](const std::string& name) -> std::optional<std::string> {
        if (name == "KOROVOD_ELASTIC_RENDEZVOUS") return "127.0.0.1:7000";
        if (name == "KOROVOD_WORKER_ID") return "localhost:1.3";
        if (name == "KOROVOD_SOCKET") return "/tmp/w.sock";
        if (name == "KOROVOD_SHM_PREFIX") return "/korovod-j-";
        if (name == "KOROVOD_JOB_KEY_FILE") return "/k";
        return std::nullopt;
      });
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_TRUE(bare->elastic());
  EXPECT_EQ(bare->elastic_server->ToString(), "127.0.0.1:7000");
  EXPECT_EQ(bare->worker_id, "localhost:1.3");
  EXPECT_EQ(bare->arena_name(), "/korovod-j-worker-localhost:1.3");
  EXPECT_EQ(bare->elastic_timeout, std::chrono::seconds(600));
  auto timed = Parse({{"KOROVOD_ELASTIC_RENDEZVOUS", "127.0.0.1:7000"},
                      {"KOROVOD_ELASTIC_TIMEOUT_SECONDS", "30"},
                      {"KOROVOD_HOST_NAME", "127.0.0.2"}});
  ASSERT_TRUE(timed.ok()) << timed.status().ToString();
  EXPECT_EQ(timed->elastic_timeout, std::chrono::seconds(30));
  EXPECT_EQ(timed->host_name, "127.0.0.2");
  EXPECT_FALSE(timed->worker_id.empty());  // defaults to this host's name and the rank
  auto bad_id =
      Parse({{"KOROVOD_ELASTIC_RENDEZVOUS", "127.0.0.1:7000"}, {"KOROVOD_WORKER_ID", "a/b"}});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_TRUE(Contains(bad_id.status().message(), "KOROVOD_WORKER_ID=a/b must be one word"))
      << bad_id.status().ToString();
  auto bad_server = Parse({{"KOROVOD_ELASTIC_RENDEZVOUS", "nowhere"}});
  ASSERT_FALSE(bad_server.ok());
  EXPECT_TRUE(Contains(bad_server.status().message(), "KOROVOD_ELASTIC_RENDEZVOUS"))
      << bad_server.status().ToString();
  auto bad_timeout = Parse(
      {{"KOROVOD_ELASTIC_RENDEZVOUS", "127.0.0.1:7000"}, {"KOROVOD_ELASTIC_TIMEOUT_SECONDS", "0"}});
  ASSERT_FALSE(bad_timeout.ok());
  EXPECT_TRUE(Contains(bad_timeout.status().message(), "KOROVOD_ELASTIC_TIMEOUT_SECONDS"));
}

}  // namespace
}  // namespace korovod::sidecar
