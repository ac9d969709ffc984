// korovod-membership-bench: the elastic membership server (runtime/world/elastic_rendezvous.h) at
// the scale of one large elastic job: N simulated members (the C++ client, no trainers, one thread
// each) join one epoch, then ask for the membership version as a trainer's commit does, then
// watch it as the sidecars do, first polling once a second (the design before the long poll),
// then holding one long poll each; last, one worker is added and every held query must hear of
// it. The server runs in a child process on its own listener, so its CPU time (utime + stime from
// /proc) is the server's alone. Prints one JSON row per phase (bench/operator/README.md).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/membership_listener.h"

namespace korovod {
namespace {

using Ms = std::chrono::milliseconds;
constexpr char kKey[] = "membership-bench-key";

struct Options {
  int members = 1000;
  int queries = 1;        // per member, back to back, all members at once
  int rest_seconds = 10;  // each watch phase
  int handshakes = 128;   // the listener's handshakes in flight (the operator's default)
};

std::string Worker(int i) { return "w" + std::to_string(i); }

std::vector<std::string> Workers(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(Worker(i));
  return out;
}

// The server process: serves until its command pipe closes. "L n" lists workers w0..w(n-1).
[[noreturn]] void ServeChild(int commands, int port_out, const Options& o) {
  MembershipListenerOptions lo;
  // One source address here (every member is on loopback): the per-source limit would stand for
  // a cluster's per-pod one, so it is the in-flight bound for both.
  lo.max_per_source = o.handshakes;
  lo.max_in_flight = o.handshakes;
  auto listener = MembershipListener::Start(lo);
  if (!listener.ok()) {
    std::fprintf(stderr, "%s\n", listener.status().ToString().c_str());
    _exit(1);
  }
  ElasticServerOptions so;
  so.job_key = kKey;
  so.min_workers = 1;
  so.timeout = Ms(600000);
  so.listener = *listener;
  auto server = ElasticRendezvousServer::Start(so);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    _exit(1);
  }
  const uint16_t port = (*listener)->port();
  (void)!::write(port_out, &port, sizeof port);
  ::close(port_out);
  std::string line;
  char c = 0;
  while (::read(commands, &c, 1) == 1) {
    if (c != '\n') {
      line += c;
      continue;
    }
    if (line.rfind("L ", 0) == 0) (*server)->SetLiveWorkers(Workers(std::stoi(line.substr(2))));
    line.clear();
  }
  server->reset();
  _exit(0);
}

double CpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::istringstream fields(all.substr(all.rfind(')') + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double Us(Clock::duration d) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

void Row(const std::string& op, int members, double time_us, const std::string& extra) {
  std::printf(
      "{\"peer\": \"korovod\", \"transport\": \"tcp\", \"op\": \"%s\", \"ranks\": %d, \"bytes\": "
      "0, \"time_us\": %.1f%s}\n",
      op.c_str(), members, time_us, extra.c_str());
  std::fflush(stdout);
}

std::string Latencies(const std::vector<double>& us) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                ", \"time_us_p50\": %.1f, \"time_us_p90\": %.1f, "
                "\"time_us_p99\": %.1f, \"iters\": %zu",
                Percentile(us, 0.5), Percentile(us, 0.9), Percentile(us, 0.99), us.size());
  return buf;
}

std::string Cpu(double seconds, double per) {
  char buf[120];
  std::snprintf(buf, sizeof buf, ", \"server_cpu_s\": %.3f, \"server_cpu_s_per_s\": %.4f", seconds,
                per);
  return buf;
}

// Runs `body(i)` on `n` threads at once and waits for all.
template <typename F>
void OnThreads(int n, F body) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads.emplace_back([&body, i] { body(i); });
  for (auto& t : threads) t.join();
}

// The members' side: the server process's address and command pipe, and what the phases share.
struct Members {
  const Options& o;
  pid_t server_pid;
  PeerAddress server;
  int commands;
  std::vector<uint64_t> formed;  // each member's epoch version
  std::atomic<int> failures{0};

  void Command(const std::string& c) const { (void)!::write(commands, c.data(), c.size()); }
  void Fail(const Status& s) {
    if (failures.fetch_add(1) < 5) std::fprintf(stderr, "member: %s\n", s.ToString().c_str());
  }
  size_t N() const { return static_cast<size_t>(o.members); }

  // 1. Every member registers for epoch 1; it forms when the last has registered.
  void Join() {
    Command("L " + std::to_string(o.members) + "\n");
    std::vector<double> join_us(N());
    formed.assign(N(), 0);
    const double cpu = CpuSeconds(server_pid);
    const auto t0 = Clock::now();
    OnThreads(o.members, [&](int i) {
      ElasticJoinOptions j;
      j.server = server;
      j.job_key = kKey;
      j.worker = Worker(i);
      j.self.host_name = Worker(i);
      j.self.node = "bench-node";
      j.self.port = static_cast<uint16_t>(20000 + i);
      j.self.addresses = {{"lo", "127.0.0.1"}};
      j.timeout = Ms(300000);
      const auto start = Clock::now();
      auto a = JoinElasticEpoch(j);
      join_us[static_cast<size_t>(i)] = Us(Clock::now() - start);
      if (!a.ok()) return Fail(a.status());
      formed[static_cast<size_t>(i)] = a->version;
    });
    const double formed_us = Us(Clock::now() - t0);
    const double used = CpuSeconds(server_pid) - cpu;
    Row("membership-join-to-formed", o.members, formed_us,
        Latencies(join_us) + Cpu(used, used / (formed_us / 1e6)));
  }

  // 2. An epoch's first commit: every member asks (no wait) at once, `queries` times.
  void Burst() {
    std::vector<std::vector<double>> per(N());
    const double cpu = CpuSeconds(server_pid);
    const auto t0 = Clock::now();
    OnThreads(o.members, [&](int i) {
      for (int k = 0; k < o.queries; ++k) {
        const auto start = Clock::now();
        auto v = QueryMembership(server, kKey, formed[static_cast<size_t>(i)],
                                 Deadline::After(Ms(30000)));
        if (!v.ok()) return Fail(v.status());
        per[static_cast<size_t>(i)].push_back(Us(Clock::now() - start));
      }
    });
    const double s = Us(Clock::now() - t0) / 1e6;
    const double used = CpuSeconds(server_pid) - cpu;
    const std::vector<double> all = Flatten(per);
    Row("membership-query", o.members, Percentile(all, 0.5), Latencies(all) + Cpu(used, used / s));
  }

  // 3. Watching at rest as before the long poll (and as every commit did before the watch's
  // cache): one query a second per member, spread over the second.
  void PollOnceASecond() {
    std::vector<std::vector<double>> per(N());
    const auto rest = Ms(o.rest_seconds * 1000);
    const double cpu = CpuSeconds(server_pid);
    const auto t0 = Clock::now();
    OnThreads(o.members, [&](int i) {
      std::this_thread::sleep_for(Ms(i * 1000 / std::max(1, o.members)));
      auto next = Clock::now();
      while (Clock::now() - t0 < rest) {
        const auto start = Clock::now();
        auto v = QueryMembership(server, kKey, formed[static_cast<size_t>(i)],
                                 Deadline::After(Ms(2000)));
        if (!v.ok()) Fail(v.status());
        per[static_cast<size_t>(i)].push_back(Us(Clock::now() - start));
        next += Ms(1000);
        std::this_thread::sleep_until(next);
      }
    });
    const double s = Us(Clock::now() - t0) / 1e6;
    const double used = CpuSeconds(server_pid) - cpu;
    const std::vector<double> all = Flatten(per);
    Row("membership-watch-poll-1hz", o.members, Percentile(all, 0.5),
        Latencies(all) + Cpu(used, used / s));
  }

  // 4. Watching at rest with long polls, then 5. one worker added: every held query answers.
  void LongPollThenPush() {
    std::atomic<int> holding{0};
    std::vector<double> push_us(N(), -1);
    std::atomic<int64_t> added_at{0};
    const auto zero = Clock::now();
    auto since_zero = [&] {
      return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - zero).count();
    };
    std::thread driver([&] {
      while (holding.load() < o.members) std::this_thread::sleep_for(Ms(10));
      const double cpu = CpuSeconds(server_pid);
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(Ms(o.rest_seconds * 1000));
      const double s = Us(Clock::now() - t0) / 1e6;
      const double used = CpuSeconds(server_pid) - cpu;
      Row("membership-watch-long-poll", o.members, s * 1e6, Cpu(used, used / s));
      added_at = since_zero();
      Command("L " + std::to_string(o.members + 1) + "\n");
    });
    OnThreads(o.members, [&](int i) {
      MembershipQuery q;
      q.since = formed[static_cast<size_t>(i)];
      q.seen = q.since;
      q.wait = Ms(25000);
      ++holding;  // the query below is held (or answered, and asked again) until the change
      while (true) {
        auto v = QueryMembership(server, kKey, q, Deadline::After(Ms(30000)));
        if (!v.ok()) return Fail(v.status());
        if (v->version <= q.seen) continue;
        push_us[static_cast<size_t>(i)] = static_cast<double>(since_zero() - added_at.load());
        return;
      }
    });
    driver.join();
    std::erase_if(push_us, [](double v) { return v < 0; });
    Row("membership-push", o.members, Percentile(push_us, 0.5), Latencies(push_us));
  }

  static std::vector<double> Flatten(const std::vector<std::vector<double>>& per) {
    std::vector<double> all;
    for (const auto& v : per) all.insert(all.end(), v.begin(), v.end());
    return all;
  }
};

int Run(const Options& o) {
  int commands[2], port_pipe[2];
  if (::pipe(commands) != 0 || ::pipe(port_pipe) != 0) return 1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(commands[1]);
    ::close(port_pipe[0]);
    ServeChild(commands[0], port_pipe[1], o);
  }
  ::close(commands[0]);
  ::close(port_pipe[1]);
  uint16_t port = 0;
  if (::read(port_pipe[0], &port, sizeof port) != sizeof port) return 1;
  Members m{o, pid, PeerAddress{"127.0.0.1", port}, commands[1], {}};
  m.Join();
  m.Burst();
  m.PollOnceASecond();
  m.LongPollThenPush();
  ::close(commands[1]);  // the server exits
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (m.failures.load() > 0) {
    std::fprintf(stderr, "%d member operations failed\n", m.failures.load());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace korovod

int main(int argc, char** argv) {
  korovod::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--members" && v > 0) {
      o.members = v;
    } else if (flag == "--queries" && v > 0) {
      o.queries = v;
    } else if (flag == "--rest-seconds" && v > 0) {
      o.rest_seconds = v;
    } else if (flag == "--handshakes" && v > 0) {
      o.handshakes = v;
    } else {
      std::fprintf(stderr,
                   "usage: korovod-membership-bench [--members N (1000)] [--queries Q (1)] "
                   "[--rest-seconds S (10)] [--handshakes H (128)]\n");
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0) {
    std::fprintf(stderr, "every flag takes a value\n");
    return 2;
  }
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;  // a socket per member on each side
  ::setrlimit(RLIMIT_NOFILE, &files);
  return korovod::Run(o);
}
