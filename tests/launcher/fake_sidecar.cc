// fake-sidecar: stands in for korovod-sidecar in the launcher tests. It checks the contract
// korovodrun gives a sidecar (environment, inherited listening socket, key file), writes what it
// saw to $FAKE_SIDECAR_REPORT_DIR/sidecar<rank>.env, creates its unix socket at $KOROVOD_SOCKET
// and a shared-memory segment named $KOROVOD_SHM_PREFIX"fake-<rank>" (deliberately never
// unlinked: korovodrun must remove it), then waits for SIGTERM/SIGINT/SIGHUP and exits 0.
//
// Misbehaviour on purpose, for the rank in $FAKE_SIDECAR_FAIL_RANK ("all": every rank), chosen by
// $FAKE_SIDECAR_MODE:
//   fail-start   print 60 lines "startup line <i>" and exit 4 (after creating the segment)
//   no-socket    never create the unix socket
//   kill-self    create socket and segment, then SIGKILL itself after $FAKE_SIDECAR_DELAY_MS
//   ignore-term  ignore SIGTERM/SIGINT/SIGHUP (only SIGKILL ends it)
// A failed check prints "fake-sidecar error: <what>" and exits 3.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "fake-sidecar error: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) Die(std::string(name) + " is not set");
  return v;
}

int EnvInt(const char* name) {
  std::string v = Env(name);
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') Die(std::string(name) + "=" + v + " is not a number");
  return static_cast<int>(n);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

void WriteReport(int rank) {
  const char* dir = std::getenv("FAKE_SIDECAR_REPORT_DIR");
  if (dir == nullptr) return;
  std::string path = std::string(dir) + "/sidecar" + std::to_string(rank) + ".env";
  std::ofstream f(path + ".tmp");
  f << "PID=" << ::getpid() << "\n";
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KOROVOD_", 8) == 0 || std::strncmp(*e, "HOROVOD_", 8) == 0) {
      f << *e << "\n";
    }
  }
  f.close();
  std::rename((path + ".tmp").c_str(), path.c_str());  // readers never see half a report
}

void CheckContract(int rank) {
  int size = EnvInt("KOROVOD_SIZE");
  if (size < 1 || rank < 0 || rank >= size) Die("rank/size out of range");
  for (const char* v :
       {"KOROVOD_LOCAL_RANK", "KOROVOD_LOCAL_SIZE", "KOROVOD_CROSS_RANK", "KOROVOD_CROSS_SIZE"}) {
    EnvInt(v);
  }
  std::vector<std::string> peers = Split(Env("KOROVOD_PEERS"), ',');
  if (static_cast<int>(peers.size()) != size) Die("KOROVOD_PEERS does not list SIZE peers");
  int fd = EnvInt("KOROVOD_LISTEN_FD");
  int accepting = 0;
  socklen_t len = sizeof accepting;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) {
    Die("KOROVOD_LISTEN_FD " + std::to_string(fd) + " is not a listening socket");
  }
  if (::fcntl(fd, F_GETFD) & FD_CLOEXEC) Die("the listening socket is close-on-exec");
  sockaddr_in addr{};
  len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string mine = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  if (peers[static_cast<size_t>(rank)] != mine) {
    Die("KOROVOD_PEERS[" + std::to_string(rank) + "] is " + peers[static_cast<size_t>(rank)] +
        " but the inherited socket is " + mine);
  }
  // No other socket of the launcher may leak into this sidecar.
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      int other = std::atoi(e->d_name);
      if (e->d_name[0] == '.' || other == fd || other == ::dirfd(d)) continue;
      struct stat st;
      if (::fstat(other, &st) == 0 && S_ISSOCK(st.st_mode)) {
        Die("unexpected inherited socket fd " + std::to_string(other));
      }
    }
    ::closedir(d);
  }
  std::string key_file = Env("KOROVOD_JOB_KEY_FILE");
  struct stat st;
  if (::stat(key_file.c_str(), &st) != 0) Die("no key file " + key_file);
  if ((st.st_mode & 0777) != 0600) Die("key file mode is not 0600");
  std::ifstream kf(key_file);
  std::string key((std::istreambuf_iterator<char>(kf)), std::istreambuf_iterator<char>());
  if (key.size() != 65 || key.back() != '\n' || key.find_first_not_of("0123456789abcdef") != 64) {
    Die("key file does not hold 64 hex digits and a newline");
  }
  std::string sock = Env("KOROVOD_SOCKET");
  std::string want = "/rank" + std::to_string(rank) + ".sock";
  if (sock.size() < want.size() || sock.compare(sock.size() - want.size(), want.size(), want)) {
    Die("KOROVOD_SOCKET " + sock + " does not end in " + want);
  }
  std::string prefix = Env("KOROVOD_SHM_PREFIX");
  if (prefix.rfind("/korovod-", 0) != 0 || prefix.back() != '-') Die("bad KOROVOD_SHM_PREFIX");
}

void CreateShm(int rank) {
  std::string name = Env("KOROVOD_SHM_PREFIX") + "fake-" + std::to_string(rank);
  int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ::ftruncate(fd, 4096) != 0) Die("shm_open " + name + ": " + std::strerror(errno));
  ::close(fd);
}

int CreateSocket() {
  std::string path = Env("KOROVOD_SOCKET");
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) Die("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 8) != 0) {
    Die("cannot listen on " + path + ": " + std::strerror(errno));
  }
  return fd;
}

}  // namespace

int main() {
  int rank = EnvInt("KOROVOD_RANK");
  WriteReport(rank);
  const char* fail_rank = std::getenv("FAKE_SIDECAR_FAIL_RANK");
  const char* mode_env = std::getenv("FAKE_SIDECAR_MODE");
  std::string mode;
  if (fail_rank != nullptr && mode_env != nullptr &&
      (std::string(fail_rank) == "all" || std::atoi(fail_rank) == rank)) {
    mode = mode_env;
  }

  sigset_t stop;
  ::sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) ::sigaddset(&stop, s);
  if (mode == "ignore-term") {
    for (int s : {SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_IGN);
  } else {
    ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  }

  CheckContract(rank);
  CreateShm(rank);
  std::printf("fake-sidecar rank %d ready\n", rank);
  std::printf("fake-sidecar rank %d: warning: this is a test warning\n", rank);
  std::fflush(stdout);
  if (mode == "fail-start") {
    for (int i = 0; i < 60; ++i) std::printf("startup line %d\n", i);
    std::fflush(stdout);
    return 4;
  }
  int sock = -1;
  if (mode != "no-socket") sock = CreateSocket();
  if (mode == "kill-self") {
    const char* delay = std::getenv("FAKE_SIDECAR_DELAY_MS");
    ::usleep(static_cast<useconds_t>(delay ? std::atoi(delay) : 100) * 1000);
    ::raise(SIGKILL);
  }
  if (mode == "ignore-term") {
    while (true) ::pause();
  }
  int sig = 0;
  ::sigwait(&stop, &sig);
  std::printf("fake-sidecar rank %d stopping on signal %d\n", rank, sig);
  if (sock >= 0) ::close(sock);
  return 0;
}
