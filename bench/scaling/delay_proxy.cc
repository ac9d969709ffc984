// korovod-delay-proxy: one-way network delay for the emulated cluster, where the kernel has no
// sch_netem (nor fq, which could delay by departure time). Runs in a host's network namespace
// behind an iptables rule that redirects the host's outgoing TCP connections to it
// (`-t nat -A OUTPUT -p tcp -d SUBNET -m mark ! --mark M -j REDIRECT --to-ports P`); it dials the
// original destination with mark M (so its own connection is not redirected again) and relays
// both directions, holding every chunk it reads for the delay before writing it on. Each byte
// between two hosts is thus delayed once, D one way and 2D a round trip; link rates stay with the
// htb classes on the veths. Test infrastructure for bench/scaling, not part of the product.
//
//   korovod-delay-proxy --port P --delay-us D [--mark M] [--max-queue-bytes B]
//
// Prints "ready" on stdout once listening; runs until SIGTERM/SIGINT.
#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"

namespace korovod::bench {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_stop = 0;

struct Options {
  int port = 0;
  std::chrono::microseconds delay{0};
  int mark = 0x4b;
  size_t max_queue_bytes = size_t{16} << 20;
};

// Bytes read from one socket, due on the other at `due`.
struct Chunk {
  std::vector<char> data;
  size_t sent = 0;
  Clock::time_point due;
};

// One direction of a relayed connection.
struct Pipe {
  int from = -1;
  int to = -1;
  std::deque<Chunk> queue;
  size_t queued = 0;
  bool eof = false;   // `from` said end of stream
  bool shut = false;  // ... and `to` has been told (after the queue drained)
  bool write_blocked = false;
};

struct Relay {
  Fd client;  // the redirected connection, accepted here
  Fd server;  // ours, to the original destination
  sockaddr_in dst{};
  bool connected = false;
  // The client's connect already succeeded (the kernel accepted it here), so a refused dial to
  // the destination cannot be passed on as a refusal: the relay dials again until it is
  // accepted, as the client would have retried (torch's TCPStore takes a reset as fatal).
  Clock::time_point redial_at{};  // while the server socket is closed between dials
  Clock::time_point give_up{};
  Pipe up;    // client -> server
  Pipe down;  // server -> client
  bool dead = false;
};

void NoDelay(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Reads what `p.from` has (up to the queue cap), stamping it due now + delay.
void ReadSide(Pipe& p, const Options& o, bool& dead) {
  while (!p.eof && p.queued < o.max_queue_bytes) {
    Chunk c;
    c.data.resize(64 << 10);
    const ssize_t n = ::read(p.from, c.data.data(), c.data.size());
    if (n > 0) {
      c.data.resize(static_cast<size_t>(n));
      c.due = Clock::now() + o.delay;
      p.queued += static_cast<size_t>(n);
      p.queue.push_back(std::move(c));
    } else if (n == 0) {
      p.eof = true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      dead = true;
      return;
    }
  }
}

// Writes every due chunk `p.to` takes; half-closes once the stream ended and drained.
void WriteSide(Pipe& p, bool& dead) {
  p.write_blocked = false;
  const Clock::time_point now = Clock::now();
  while (!p.queue.empty() && p.queue.front().due <= now) {
    Chunk& c = p.queue.front();
    const ssize_t n = ::send(p.to, c.data.data() + c.sent, c.data.size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      p.queued -= static_cast<size_t>(n);
      if (c.sent == c.data.size()) p.queue.pop_front();
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      p.write_blocked = true;
      return;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      dead = true;
      return;
    }
  }
  if (p.eof && p.queue.empty() && !p.shut) {
    (void)::shutdown(p.to, SHUT_WR);
    p.shut = true;
  }
}

// Starts a non-blocking dial of r.dst, marked so that the REDIRECT rule lets it pass.
bool Dial(Relay& r, int epoll_fd, const Options& o) {
  r.server = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!r.server.valid()) return false;
  (void)::setsockopt(r.server.get(), SOL_SOCKET, SO_MARK, &o.mark, sizeof o.mark);
  NoDelay(r.server.get());
  if (::connect(r.server.get(), reinterpret_cast<const sockaddr*>(&r.dst), sizeof r.dst) != 0 &&
      errno != EINPROGRESS) {
    return false;
  }
  r.up.to = r.down.from = r.server.get();
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.ptr = &r;
  return ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, r.server.get(), &ev) == 0;
}

uint32_t Interest(const Pipe& reading, const Pipe& writing, const Options& o) {
  uint32_t ev = 0;
  if (!reading.eof && reading.queued < o.max_queue_bytes) ev |= EPOLLIN;
  if (writing.write_blocked) ev |= EPOLLOUT;
  return ev;
}

int Run(const Options& o) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int one = 1;
  (void)::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(o.port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!listener.valid() ||
      ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) ||
      ::listen(listener.get(), 512)) {
    std::fprintf(stderr, "korovod-delay-proxy: cannot listen on port %d: %s\n", o.port,
                 std::strerror(errno));
    return 1;
  }
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  epoll_event lev{};
  lev.events = EPOLLIN;
  lev.data.ptr = nullptr;
  ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, listener.get(), &lev);
  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<std::unique_ptr<Relay>> relays;
  std::vector<epoll_event> events(256);
  while (!g_stop) {
    // Sleep until the earliest chunk is due on a writable socket, or an event.
    Clock::time_point wake = Clock::now() + std::chrono::milliseconds(200);
    for (auto& r : relays) {
      if (!r->connected && !r->server.valid() && r->redial_at < wake) wake = r->redial_at;
      for (Pipe* p : {&r->up, &r->down}) {
        if (r->connected && !p->write_blocked && !p->queue.empty() && p->queue.front().due < wake) {
          wake = p->queue.front().due;
        }
      }
    }
    const auto wait = std::max<Clock::duration>(wake - Clock::now(), Clock::duration::zero());
    timespec ts{};
    ts.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(wait).count();
    ts.tv_nsec =
        (std::chrono::duration_cast<std::chrono::nanoseconds>(wait) % std::chrono::seconds(1))
            .count();
    const int n =
        ::epoll_pwait2(ep.get(), events.data(), static_cast<int>(events.size()), &ts, nullptr);
    if (n < 0 && errno != EINTR) {
      std::perror("korovod-delay-proxy: epoll_pwait2");
      return 1;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr != nullptr) continue;  // relays are all serviced below
      while (true) {
        Fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!c.valid()) break;
        sockaddr_in dst{};
        socklen_t len = sizeof dst;
        if (::getsockopt(c.get(), SOL_IP, SO_ORIGINAL_DST, &dst, &len) != 0) continue;
        auto r = std::make_unique<Relay>();
        r->dst = dst;
        r->give_up = Clock::now() + std::chrono::seconds(60);
        NoDelay(c.get());
        r->client = std::move(c);
        r->up.from = r->down.to = r->client.get();
        epoll_event ev{};
        ev.data.ptr = r.get();
        ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, r->client.get(), &ev);
        if (!Dial(*r, ep.get(), o)) continue;  // the client sees its connection close
        relays.push_back(std::move(r));
      }
    }
    // Service every relay: few connections per host, so a pass over all is cheap and simple.
    for (auto& r : relays) {
      if (!r->connected) {
        if (!r->server.valid()) {  // between dials
          if (Clock::now() < r->redial_at) continue;
          if (!Dial(*r, ep.get(), o)) r->dead = true;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        (void)::getsockopt(r->server.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        sockaddr_in peer{};
        socklen_t plen = sizeof peer;
        if (err != 0) {
          r->server.Reset();  // closing it also takes it out of the epoll set
          r->redial_at = Clock::now() + std::chrono::milliseconds(50);
          if (r->redial_at > r->give_up) r->dead = true;
          continue;
        }
        if (::getpeername(r->server.get(), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
          continue;  // still connecting
        }
        r->connected = true;
      }
      if (!r->dead) {
        bool dead = false;
        ReadSide(r->up, o, dead);
        ReadSide(r->down, o, dead);
        WriteSide(r->up, dead);
        WriteSide(r->down, dead);
        r->dead = dead || (r->up.shut && r->down.shut);
      }
      if (r->dead) continue;
      for (auto [fd, reading, writing] : {std::tuple{r->client.get(), &r->up, &r->down},
                                          std::tuple{r->server.get(), &r->down, &r->up}}) {
        epoll_event ev{};
        ev.events = Interest(*reading, *writing, o);
        ev.data.ptr = r.get();
        ::epoll_ctl(ep.get(), EPOLL_CTL_MOD, fd, &ev);
      }
    }
    std::erase_if(relays, [](const std::unique_ptr<Relay>& r) { return r->dead; });
  }
  return 0;
}

}  // namespace
}  // namespace korovod::bench

int main(int argc, char** argv) {
  korovod::bench::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--port") {
      o.port = std::atoi(v);
    } else if (a == "--delay-us") {
      o.delay = std::chrono::microseconds(std::atoll(v));
    } else if (a == "--mark") {
      o.mark = static_cast<int>(std::strtol(v, nullptr, 0));
    } else if (a == "--max-queue-bytes") {
      o.max_queue_bytes = std::strtoull(v, nullptr, 10);
    } else {
      std::fprintf(stderr, "korovod-delay-proxy: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (o.port <= 0 || o.port > 65535 || o.delay.count() < 0 || argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: korovod-delay-proxy --port P --delay-us D [--mark M] "
                 "[--max-queue-bytes B]\n");
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = [](int) { korovod::bench::g_stop = 1; };
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  return korovod::bench::Run(o);
}
