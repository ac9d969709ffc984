// Starts real korovod-sidecar processes with korovodrun's environment contract and drives them
// with korovod_client from forked trainer processes.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sidecar/client/client.h"
#include "sidecar/daemon/sidecar_config.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;

// In forked trainers: report and exit non-zero (gtest assertions do not cross fork).
#define TCHECK(cond)                                                                      \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "trainer %d: %s:%d: check failed: %s\n", ::getpid(), __FILE__, \
                   __LINE__, #cond);                                                      \
      std::_Exit(1);                                                                      \
    }                                                                                     \
  } while (0)
#define TOK(expr)                                                                                \
  do {                                                                                           \
    const ::korovod::Status _s = (expr);                                                         \
    if (!_s.ok()) {                                                                              \
      std::fprintf(stderr, "trainer %d: %s:%d: %s: %s\n", ::getpid(), __FILE__, __LINE__, #expr, \
                   _s.ToString().c_str());                                                       \
      std::_Exit(1);                                                                             \
    }                                                                                            \
  } while (0)

template <typename T>
T Must(StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "trainer %d: %s\n", ::getpid(), v.status().ToString().c_str());
    std::_Exit(1);
  }
  return std::move(v).value();
}

int ListenOnLoopback(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 64) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int FreePort() {
  int port = 0;
  int fd = ListenOnLoopback(&port);
  ::close(fd);
  return port;
}

std::string HttpGet(int port, const std::string& path, int* status) {
  *status = 0;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return {};
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
  ::close(fd);
  if (resp.size() > 12) *status = std::atoi(resp.c_str() + 9);
  return resp;
}

// A job of `n` sidecars on this host.
class Job {
 public:
  explicit Job(int n) : n_(n) {
    char tmpl[] = "/tmp/kvsd-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    static int counter = 0;
    prefix_ = "/kvsdtest-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-";
    key_file_ = dir_ + "/job.key";
    {
      std::ofstream k(key_file_);
      k << std::string(64, 'a') << "\n";
    }
    ::chmod(key_file_.c_str(), 0600);
    std::vector<int> fds(n);
    std::string peers;
    for (int r = 0; r < n; ++r) {
      int port = 0;
      fds[r] = ListenOnLoopback(&port);
      peers += (r ? "," : "") + std::string("127.0.0.1:") + std::to_string(port);
      metrics_ports_.push_back(FreePort());
    }
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> env = {
          "KOROVOD_RANK=" + std::to_string(r),
          "KOROVOD_SIZE=" + std::to_string(n),
          "KOROVOD_LOCAL_RANK=" + std::to_string(r),
          "KOROVOD_LOCAL_SIZE=" + std::to_string(n),
          "KOROVOD_CROSS_RANK=0",
          "KOROVOD_CROSS_SIZE=1",
          "KOROVOD_PEERS=" + peers,
          "KOROVOD_LISTEN_FD=" + std::to_string(fds[r]),
          "KOROVOD_JOB_KEY_FILE=" + key_file_,
          "KOROVOD_SOCKET=" + socket(r),
          "KOROVOD_SHM_PREFIX=" + prefix_,
          "KOROVOD_METRICS_PORT=" + std::to_string(metrics_ports_[r]),
          "KOROVOD_START_TIMEOUT_SECONDS=20",
          "KOROVOD_ARENA_HEAP_MIB=4",
          "PATH=/usr/bin:/bin",
      };
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      const std::string log = dir_ + "/rank" + std::to_string(r) + ".log";
      char* argv[] = {const_cast<char*>(KOROVOD_SIDECAR_BIN), nullptr};
      pid_t pid = ::fork();
      if (pid == 0) {
        ::fcntl(fds[r], F_SETFD, 0);
        int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(logfd, 2);
        ::execve(argv[0], argv, envp.data());
        std::_Exit(127);
      }
      pids_.push_back(pid);
    }
    for (int fd : fds) ::close(fd);
  }

  ~Job() {
    for (pid_t p : pids_) {
      if (p > 0) ::kill(p, SIGTERM);
    }
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] <= 0) continue;
      int st = 0;
      if (!WaitPid(pids_[r], 10s, &st)) {
        ::kill(pids_[r], SIGKILL);
        ::waitpid(pids_[r], &st, 0);
        ADD_FAILURE() << "sidecar " << r << " did not exit on SIGTERM\n" << Log(r);
      } else {
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
            << "sidecar " << r << " status " << st << "\n"
            << Log(r);
      }
      struct stat sb {};
      EXPECT_NE(::stat(socket(r).c_str(), &sb), 0) << "socket left behind";
    }
    // Nothing of the job may stay in /dev/shm.
    const std::string name = prefix_.substr(1);
    if (DIR* d = ::opendir("/dev/shm")) {
      while (dirent* e = ::readdir(d)) {
        if (std::string(e->d_name).rfind(name, 0) == 0) {
          ADD_FAILURE() << "left in /dev/shm: " << e->d_name;
          ::unlink((std::string("/dev/shm/") + e->d_name).c_str());
        }
      }
      ::closedir(d);
    }
    std::string cmd = "rm -rf " + dir_;
    (void)!std::system(cmd.c_str());
  }

  static bool WaitPid(pid_t pid, std::chrono::milliseconds timeout, int* st) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(pid, st, WNOHANG) == pid) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  // Waits for every sidecar's socket (korovodrun's readiness signal).
  ::testing::AssertionResult WaitReady() {
    const auto end = std::chrono::steady_clock::now() + 20s;
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
      if ((sb.st_mode & 0777) != 0660) {
        return ::testing::AssertionFailure() << "socket mode " << std::oct << (sb.st_mode & 0777);
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Runs `trainer(rank)` in one forked process per rank; true if all exit 0.
  ::testing::AssertionResult RunTrainers(const std::function<void(int)>& trainer) {
    std::vector<pid_t> kids;
    for (int r = 0; r < n_; ++r) {
      pid_t pid = ::fork();
      if (pid == 0) {
        trainer(r);
        std::_Exit(0);
      }
      kids.push_back(pid);
    }
    ::testing::AssertionResult result = ::testing::AssertionSuccess();
    for (int r = 0; r < n_; ++r) {
      int st = 0;
      if (!WaitPid(kids[r], 30s, &st)) {
        ::kill(kids[r], SIGKILL);
        ::waitpid(kids[r], &st, 0);
        result = ::testing::AssertionFailure() << "trainer " << r << " timed out\n" << Log(r);
      } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        result = ::testing::AssertionFailure() << "trainer " << r << " failed (" << st << ")\n"
                                               << Log(r);
      }
    }
    return result;
  }

  // Waits for sidecar r to exit on its own; true with exit status 0.
  bool ExitsCleanly(int r, std::chrono::milliseconds timeout) {
    int st = 0;
    if (!WaitPid(pids_[r], timeout, &st)) return false;
    pids_[r] = -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }

  std::string socket(int r) const { return dir_ + "/rank" + std::to_string(r) + ".sock"; }
  int metrics_port(int r) const { return metrics_ports_[r]; }
  pid_t pid(int r) const { return pids_[r]; }
  std::string Log(int r) const {
    std::ifstream in(dir_ + "/rank" + std::to_string(r) + ".log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  int n_;
  std::string dir_;
  std::string prefix_;
  std::string key_file_;
  std::vector<pid_t> pids_;
  std::vector<int> metrics_ports_;
};

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
  // Control plane: a process set of every rank, the timeline on and off.
  {
    std::vector<int> all;
    for (int r = 0; r < n; ++r) all.push_back(r);
    const int id = Must(client->AddProcessSet(all));
    TCHECK(id > 0);
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
                                                {"KOROVOD_SHM_PREFIX", "/korovod-j-"}}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->arena_name(), "/korovod-j-rank1");
  EXPECT_EQ(ok->peers[1].port, 2);
}

}  // namespace
}  // namespace korovod::sidecar
