#include "tests/sidecar/daemon/sidecar_test_job.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace korovod::sidecar::daemon_test {

using namespace std::chrono_literals;

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

grpc::Status CallHello(const std::string& socket, uint32_t version, v1::HelloReply* reply) {
  auto stub = v1::Sidecar::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  v1::HelloRequest req;
  req.set_protocol_version(version);
  req.set_client_pid(static_cast<int32_t>(::getpid()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  return stub->Hello(&ctx, req, reply);
}

const char* SidecarBinary() { return KOROVOD_SIDECAR_BIN; }

int RunToExit(const char* binary, const std::vector<std::string>& env, const std::string& log,
              std::chrono::milliseconds timeout) {
  std::vector<std::string> owned = env;
  std::vector<char*> envp;
  for (auto& e : owned) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    char* argv[] = {const_cast<char*>(binary), nullptr};
    ::execve(argv[0], argv, envp.data());
    std::_Exit(127);
  }
  int st = 0;
  if (!Job::WaitPid(pid, timeout, &st)) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    return -1;
  }
  return st;
}

Job::Job(int n, std::vector<std::string> extra_env, int ranks_per_sidecar, const char* binary)
    : n_(n), per_(ranks_per_sidecar) {
  if (binary == nullptr) binary = KOROVOD_SIDECAR_BIN;
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
  }
  for (int r = 0; r < n; r += per_) {
    std::string listen_fds;
    for (int k = r; k < r + per_; ++k) listen_fds += (k > r ? "," : "") + std::to_string(fds[k]);
    const std::string socket_template =
        per_ == 1 ? socket(r) : dir_ + "/s" + std::to_string(r / per_) + "-rank{local_rank}.sock";
    std::vector<std::string> env = {
        "KOROVOD_RANK=" + std::to_string(r),
        "KOROVOD_SIZE=" + std::to_string(n),
        "KOROVOD_SIDECAR_RANKS=" + std::to_string(per_),
        "KOROVOD_LOCAL_RANK=" + std::to_string(per_ == 1 ? r : 0),
        "KOROVOD_LOCAL_SIZE=" + std::to_string(per_ == 1 ? n : per_),
        "KOROVOD_CROSS_RANK=" + std::to_string(per_ == 1 ? 0 : r / per_),
        "KOROVOD_CROSS_SIZE=" + std::to_string(per_ == 1 ? 1 : n / per_),
        "KOROVOD_PEERS=" + peers,
        "KOROVOD_LISTEN_FD=" + listen_fds,
        "KOROVOD_JOB_KEY_FILE=" + key_file_,
        "KOROVOD_SOCKET=" + socket_template,
        "KOROVOD_SHM_PREFIX=" + prefix_,
        "KOROVOD_METRICS_PORT=0",
        "KOROVOD_START_TIMEOUT_SECONDS=20",
        "KOROVOD_ARENA_HEAP_MIB=4",
        "PATH=/usr/bin:/bin",
    };
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string log = dir_ + "/rank" + std::to_string(r / per_) + ".log";
    char* argv[] = {const_cast<char*>(binary), nullptr};
    pid_t pid = ::fork();
    if (pid == 0) {
      for (int k = r; k < r + per_; ++k) ::fcntl(fds[k], F_SETFD, 0);
      int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(logfd, 2);
      ::execve(argv[0], argv, envp.data());
      std::_Exit(127);
    }
    pids_.push_back(pid);
  }
  for (int fd : fds) ::close(fd);
}

Job::~Job() {
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
  }
  for (int r = 0; r < n_; ++r) {
    struct stat sb {};
    EXPECT_NE(::stat(socket(r).c_str(), &sb), 0) << "socket left behind: " << socket(r);
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

bool Job::WaitPid(pid_t pid, std::chrono::milliseconds timeout, int* st) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (::waitpid(pid, st, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

::testing::AssertionResult Job::WaitReady() {
  const auto end = std::chrono::steady_clock::now() + 20s;
  for (int r = 0; r < n_; ++r) {
    struct stat sb {};
    const int s = r / per_;
    while (::stat(socket(r).c_str(), &sb) != 0) {
      int st = 0;
      if (pids_[s] <= 0 || ::waitpid(pids_[s], &st, WNOHANG) == pids_[s]) {
        pids_[s] = -1;
        return ::testing::AssertionFailure() << "sidecar " << s << " exited: " << Log(s);
      }
      if (std::chrono::steady_clock::now() > end) {
        return ::testing::AssertionFailure() << "sidecar " << s << " not ready: " << Log(s);
      }
      std::this_thread::sleep_for(10ms);
    }
    if ((sb.st_mode & 0777) != 0660) {
      return ::testing::AssertionFailure() << "socket mode " << std::oct << (sb.st_mode & 0777);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Job::RunTrainers(const std::function<void(int)>& trainer) {
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

bool Job::ExitsCleanly(int r, std::chrono::milliseconds timeout) {
  int st = 0;
  if (!WaitPid(pids_[r], timeout, &st)) return false;
  pids_[r] = -1;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

bool Job::Running(int r) {
  if (pids_[r] <= 0) return false;
  int st = 0;
  if (::waitpid(pids_[r], &st, WNOHANG) != pids_[r]) return true;
  pids_[r] = -1;
  return false;
}

std::string Job::Log(int r) const {
  std::ifstream in(dir_ + "/rank" + std::to_string(r) + ".log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ReportedMetricsPort(const std::string& log_path, int rank, int size) {
  // The sidecar's start-up line: "rank R/N on HOST: ..., metrics port P".
  const std::string line_start =
      "rank " + std::to_string(rank) + "/" + std::to_string(size) + " on ";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    std::ifstream in(log_path);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string log = ss.str();
    const size_t at = log.find(line_start);
    const size_t end = at == std::string::npos ? at : log.find('\n', at);
    if (end != std::string::npos) {
      const size_t port_at = log.rfind("metrics port ", end);
      if (port_at != std::string::npos && port_at > at)
        return std::atoi(log.c_str() + port_at + 13);
    }
    std::this_thread::sleep_for(10ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return -1;
}

int Job::metrics_port(int r) const {
  return ReportedMetricsPort(dir_ + "/rank" + std::to_string(r / per_) + ".log", r, n_);
}

}  // namespace korovod::sidecar::daemon_test
