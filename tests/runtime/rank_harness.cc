#include "tests/runtime/rank_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "gtest/gtest.h"

namespace korovod::testing {
namespace {

bool IsAbsent(const WorldSpec& spec, int rank) {
  return std::find(spec.absent_ranks.begin(), spec.absent_ranks.end(), rank) !=
         spec.absent_ranks.end();
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "rank_harness: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

WorldOptions OptionsFor(const WorldSpec& spec, int rank, const std::vector<PeerAddress>& peers,
                        int listen_fd) {
  WorldOptions o;
  o.rank = rank;
  o.peers = peers;
  o.listen_fd = listen_fd;
  o.job_key = spec.job_key;
  o.transport = spec.transport;
  o.connect_timeout = spec.connect_timeout;
  o.op_timeout = spec.op_timeout;
  if (spec.customize) spec.customize(o);
  return o;
}

// Pre-binds every rank's socket so every port is known before anyone starts.
struct Sockets {
  std::vector<PeerAddress> peers;
  std::vector<int> fds;
};

Sockets BindAll(const WorldSpec& spec) {
  Sockets s;
  s.peers.resize(spec.size);
  s.fds.assign(spec.size, -1);
  for (int r = 0; r < spec.size; ++r) {
    s.peers[r].host = "127.0.0.1";
    if (IsAbsent(spec, r) && !spec.absent_rank_listens) {
      s.peers[r].port = UnusedLoopbackPort();
    } else {
      const uint32_t ip =
          spec.distinct_loopback_hosts ? 0x7f000001u + static_cast<uint32_t>(r) : 0x7f000001u;
      s.fds[r] = ListenLoopback(&s.peers[r].port, ip);
      s.peers[r].host = "127.0.0." + std::to_string(ip & 0xff);
    }
  }
  return s;
}

// Child -> parent pipe messages.
constexpr char kReadyTag = 'R';
constexpr char kStatusTag = 'S';

bool WriteAll(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = ::write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// 'S', code (int32), steady-clock time in ns (int64), message length (uint32), message.
bool WriteReport(int fd, const Status& status) {
  const int64_t at =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const int32_t code = static_cast<int32_t>(status.code());
  const uint32_t len = static_cast<uint32_t>(status.message().size());
  std::string msg(1, kStatusTag);
  msg.append(reinterpret_cast<const char*>(&code), sizeof code);
  msg.append(reinterpret_cast<const char*>(&at), sizeof at);
  msg.append(reinterpret_cast<const char*>(&len), sizeof len);
  msg += status.message();
  return WriteAll(fd, msg.data(), msg.size());
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "wait status " + std::to_string(status);
}

}  // namespace

const char* TransportName(TransportKind t) {
  switch (t) {
    case TransportKind::kAuto:
      return "auto";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
  }
  return "unknown";
}

int ListenLoopback(uint16_t* port, uint32_t ip) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(ip);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Die("bind 127.0.0.x:0");
  if (::listen(fd, 256) != 0) Die("listen");
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) Die("getsockname");
  *port = ntohs(addr.sin_port);
  return fd;
}

uint16_t UnusedLoopbackPort() {
  uint16_t port = 0;
  ::close(ListenLoopback(&port));
  return port;
}

int ThreadCount() {
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n;
}

ThreadWorld RunThreadRanks(const WorldSpec& spec, const RankBody& body) {
  Sockets sockets = BindAll(spec);
  ThreadWorld world;
  world.peers = sockets.peers;
  world.reports.resize(spec.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < spec.size; ++r) {
    RankReport& report = world.reports[r];
    report.rank = r;
    if (IsAbsent(spec, r)) continue;
    report.started = true;
    const WorldOptions options = OptionsFor(spec, r, sockets.peers, sockets.fds[r]);
    threads.emplace_back([&report, &body, options] {
      const auto start = std::chrono::steady_clock::now();
      try {
        auto comm = Communicator::Create(options);
        if (!comm.ok()) {
          report.status = comm.status();
        } else {
          report.created = true;
          std::unique_ptr<Communicator> c = std::move(comm).value();
          RankContext ctx(options.rank, c.get());
          report.status = body(ctx);
          report.failures = ctx.failures();
          report.digests = ctx.digests();
          c.reset();
        }
      } catch (const std::exception& e) {
        report.status = Internal(std::string("uncaught exception: ") + e.what());
      }
      report.elapsed = std::chrono::steady_clock::now() - start;
    });
  }
  for (auto& t : threads) t.join();
  for (int fd : sockets.fds) {
    if (fd >= 0) ::close(fd);
  }
  return world;
}

void ExpectAllRanksOk(const ThreadWorld& world) {
  constexpr size_t kMaxFailuresShown = 20;
  for (const RankReport& r : world.reports) {
    if (!r.started) continue;
    if (!r.status.ok()) {
      ADD_FAILURE() << "rank " << r.rank << (r.created ? " failed: " : " could not connect: ")
                    << r.status.ToString();
    }
    for (size_t i = 0; i < r.failures.size() && i < kMaxFailuresShown; ++i) {
      ADD_FAILURE() << "rank " << r.rank << ": " << r.failures[i];
    }
    if (r.failures.size() > kMaxFailuresShown) {
      ADD_FAILURE() << "rank " << r.rank << ": ... and " << r.failures.size() - kMaxFailuresShown
                    << " more failed checks";
    }
  }
  // Every rank that recorded a key must hold the same bits.
  std::map<std::string, std::vector<std::pair<int, uint64_t>>> by_key;
  for (const RankReport& r : world.reports) {
    for (const auto& [key, digest] : r.digests) by_key[key].emplace_back(r.rank, digest);
  }
  size_t disagreements = 0;
  for (const auto& [key, list] : by_key) {
    const bool same = std::all_of(list.begin(), list.end(),
                                  [&](const auto& p) { return p.second == list.front().second; });
    if (same) continue;
    if (++disagreements > kMaxFailuresShown) continue;
    std::string detail;
    for (const auto& [rank, digest] : list) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
      detail += " rank " + std::to_string(rank) + "=" + hex;
    }
    ADD_FAILURE() << key << ": ranks hold different bits:" << detail;
  }
  if (disagreements > kMaxFailuresShown) {
    ADD_FAILURE() << "... and " << disagreements - kMaxFailuresShown
                  << " more results that differ between ranks";
  }
}

// ---- Process variant ----

StatusOr<std::unique_ptr<ProcessWorld>> ProcessWorld::Start(const WorldSpec& spec,
                                                            const ProcessBody& body) {
  const int threads = ThreadCount();
  if (threads != 1) {
    return FailedPrecondition("ProcessWorld::Start needs a single-threaded process, this one has " +
                              std::to_string(threads) + " threads");
  }
  Sockets sockets = BindAll(spec);
  std::unique_ptr<ProcessWorld> world(new ProcessWorld());
  world->peers_ = sockets.peers;
  world->children_.resize(spec.size);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < spec.size; ++r) {
    if (IsAbsent(spec, r)) continue;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) Die("pipe2");
    const pid_t pid = ::fork();
    if (pid < 0) Die("fork");
    if (pid == 0) {
      // Child: keep only this rank's socket and the write end of its own pipe.
      ::close(p[0]);
      for (int q = 0; q < spec.size; ++q) {
        if (q != r && sockets.fds[q] >= 0) ::close(sockets.fds[q]);
        if (q < r && world->children_[q].pipe_fd >= 0) ::close(world->children_[q].pipe_fd);
      }
      const int out = p[1];
      const WorldOptions options = OptionsFor(spec, r, sockets.peers, sockets.fds[r]);
      auto comm = Communicator::Create(options);
      if (!comm.ok()) {
        const bool wrote = WriteReport(out, comm.status());
        ::_exit(wrote ? 0 : 3);
      }
      std::unique_ptr<Communicator> c = std::move(comm).value();
      bool said_ready = false;
      const std::function<void()> ready = [&] {
        if (said_ready) return;
        said_ready = true;
        (void)WriteAll(out, &kReadyTag, 1);
      };
      const Status status = body(*c, ready);
      // Report before tearing down, so the parent times the error, not the shutdown.
      const bool wrote = WriteReport(out, status);
      c.reset();
      ::_exit(wrote ? 0 : 3);
    }
    ::close(p[1]);
    world->children_[r].pid = pid;
    world->children_[r].pipe_fd = p[0];
  }
  for (int fd : sockets.fds) {
    if (fd >= 0) ::close(fd);
  }
  return world;
}

ProcessWorld::~ProcessWorld() {
  for (Child& c : children_) {
    if (c.pid > 0 && !c.reaped) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.wait_status, 0);
      c.reaped = true;
    }
    if (c.pipe_fd >= 0) ::close(c.pipe_fd);
  }
}

void ProcessWorld::Parse(Child& c) {
  while (!c.buffer.empty()) {
    if (c.buffer[0] == kReadyTag) {
      c.ready = true;
      c.buffer.erase(0, 1);
      continue;
    }
    constexpr size_t kHeader = 1 + sizeof(int32_t) + sizeof(int64_t) + sizeof(uint32_t);
    if (c.buffer[0] != kStatusTag || c.buffer.size() < kHeader) return;
    int32_t code;
    int64_t at;
    uint32_t len;
    std::memcpy(&code, c.buffer.data() + 1, sizeof code);
    std::memcpy(&at, c.buffer.data() + 1 + sizeof code, sizeof at);
    std::memcpy(&len, c.buffer.data() + 1 + sizeof code + sizeof at, sizeof len);
    if (c.buffer.size() < kHeader + len) return;
    ProcessReport report;
    report.reported = true;
    report.status = Status(static_cast<StatusCode>(code), c.buffer.substr(kHeader, len));
    report.at = Clock::time_point(std::chrono::nanoseconds(at));
    c.report = std::move(report);
    c.buffer.erase(0, kHeader + len);
  }
}

void ProcessWorld::Pump(Deadline deadline) {
  std::vector<pollfd> fds;
  std::vector<Child*> who;
  for (Child& c : children_) {
    if (c.pipe_fd < 0 || c.eof) continue;
    fds.push_back({c.pipe_fd, POLLIN, 0});
    who.push_back(&c);
  }
  if (fds.empty()) return;
  if (::poll(fds.data(), fds.size(), deadline.RemainingMs(100)) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
    if (n > 0) {
      who[i]->buffer.append(buf, static_cast<size_t>(n));
      Parse(*who[i]);
    } else if (n == 0 || errno != EINTR) {
      who[i]->eof = true;
    }
  }
}

bool ProcessWorld::WaitReady(Deadline deadline) {
  while (true) {
    const bool all = std::all_of(children_.begin(), children_.end(), [](const Child& c) {
      return c.pid < 0 || c.ready || c.report.has_value() || c.eof;
    });
    if (all) return true;
    if (deadline.Expired()) return false;
    Pump(deadline);
  }
}

void ProcessWorld::Kill(int rank) {
  if (children_[rank].pid > 0 && !children_[rank].reaped) ::kill(children_[rank].pid, SIGKILL);
}

std::optional<ProcessReport> ProcessWorld::WaitReport(int rank, Deadline deadline) {
  Child& c = children_[rank];
  while (!c.report.has_value() && !c.eof && c.pipe_fd >= 0 && !deadline.Expired()) {
    Pump(deadline);
  }
  return c.report;
}

std::string ProcessWorld::WaitExit(int rank, Deadline deadline) {
  Child& c = children_[rank];
  if (c.pid < 0) return "never started";
  while (!c.reaped) {
    const pid_t got = ::waitpid(c.pid, &c.wait_status, WNOHANG);
    if (got == c.pid) {
      c.reaped = true;
      break;
    }
    if (deadline.Expired()) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.wait_status, 0);
      c.reaped = true;
      return "still running at the deadline";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return DescribeWait(c.wait_status);
}

}  // namespace korovod::testing
