#include "runtime/world/rendezvous.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "runtime/transport/handshake.h"
#include "runtime/transport/handshake_listener.h"
#include "runtime/transport/socket.h"
#include "runtime/world/rendezvous_frame.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

constexpr uint32_t kMaxRegistration = 64 << 10;
constexpr uint32_t kMaxTable = 64 << 20;
constexpr auto kPerConnection = std::chrono::milliseconds(5000);

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// Rank 0: collects every registration, then answers every rank with the table.
StatusOr<std::vector<RankEntry>> Serve(const RendezvousOptions& o, Deadline deadline) {
  const std::string me = "rank 0 (host " + o.self.host_name + ")";
  if (o.size == 1) {
    std::vector<RankEntry> alone{o.self};
    ApplyLoopbackRule(alone);
    return alone;
  }
  Fd owned;
  int listen_fd = o.coordinator_listen_fd;
  if (listen_fd < 0) {
    auto l = ListenTcp("0.0.0.0", o.coordinator.port, 128);
    if (!l.ok()) {
      return l.status().WithContext(me + ": cannot serve the rendezvous coordinator " +
                                    o.coordinator.ToString());
    }
    owned = std::move(l).value();
    listen_fd = owned.get();
  }
  std::vector<RankEntry> table(o.size);
  std::vector<bool> registered(o.size, false);
  std::vector<Fd> clients(o.size);
  table[0] = o.self;
  registered[0] = true;
  std::string rejections;
  auto missing = [&] {
    return static_cast<int>(std::count(registered.begin(), registered.end(), false));
  };
  // Handshakes run concurrently in the listener: a client that stalls, floods or lies is refused
  // there and cannot hold up the genuine ranks' registrations.
  HandshakeListener listener(
      listen_fd,
      HandshakeListenerOptions{o.job_key, 0, me + ", rendezvous coordinator",
                               std::chrono::milliseconds(kPerConnection)},
      [&o](const Hello& h) -> std::string {
        if (h.stream != kRendezvousStream || h.to != 0 || h.world != o.size || h.from <= 0 ||
            h.from >= o.size) {
          return "not a registration for this world (size " + std::to_string(o.size) + ")";
        }
        return "";
      });
  while (missing() > 0) {
    auto accepted = listener.Next(deadline);
    if (!accepted.ok()) {
      std::string absent, present;
      bool key_refused = false;
      for (int r = 0; r < o.size; ++r) {
        std::string& list = registered[r] ? present : absent;
        list += (list.empty() ? "rank " : ", rank ") + std::to_string(r);
        if (registered[r]) list += " (host " + table[r].host_name + ")";
        key_refused = key_refused || (!registered[r] && listener.KeyRefusedFor(r));
      }
      const std::string text = me + ": the rendezvous at " + o.coordinator.ToString() +
                               " timed out after " + Ms(o.timeout) + ": " + absent +
                               " did not register (registered: " + present + ")" + rejections +
                               listener.RejectionSummary();
      return key_refused ? PermissionDenied(text + " (the job keys differ?)")
                         : DeadlineExceeded(text);
    }
    Fd fd = std::move(accepted->fd);
    const int from = accepted->hello.from;
    const std::string who = "rank " + std::to_string(from) + " (" + accepted->source + ")";
    auto text = ReadFrame(fd.get(), "R", kMaxRegistration, deadline.Sooner(kPerConnection), who);
    if (!text.ok()) continue;
    auto entry = ParseRankLine(*text, who + "'s registration: ");
    if (!entry.ok() || entry->first != from) {
      rejections +=
          "; rejected " + who + "'s registration: " +
          (entry.ok() ? "it names rank " + std::to_string(entry->first) : entry.status().message());
      continue;
    }
    // A rank that registers again (it lost its connection and retried) replaces its entry.
    table[from] = std::move(entry->second);
    registered[from] = true;
    clients[from] = std::move(fd);
  }
  ApplyLoopbackRule(table);
  const std::string text = FormatWorldTable(table);
  for (int r = 1; r < o.size; ++r) {
    // A rank that vanished after registering finds out when the mesh does not form; the others
    // must not wait for it here.
    (void)WriteFrame(clients[r].get(), FrameType::kTable, text, deadline.Sooner(kPerConnection),
                     DescribeRank(table, r));
  }
  return table;
}

// Every other rank: register with rank 0 and wait for the table, retrying until the deadline.
StatusOr<std::vector<RankEntry>> Join(const RendezvousOptions& o, Deadline deadline) {
  const std::string me = "rank " + std::to_string(o.rank) + " (host " + o.self.host_name + ")";
  const std::string coord = "the rendezvous coordinator (rank 0) at " + o.coordinator.ToString();
  const std::string registration = FormatRankLine(o.rank, o.self);
  std::string last_error = "no attempt finished";
  bool registered = false;
  auto backoff = std::chrono::milliseconds(100);
  while (!deadline.Expired()) {
    // Resolved again each round: on Kubernetes rank 0's DNS name appears only once its pod has an
    // address and the Service's endpoints list it, which may be after this rank starts.
    auto conn = ConnectTcpAny(o.coordinator, deadline);
    if (!conn.ok()) {
      last_error = conn.status().message();
      break;
    }
    Fd fd = std::move(conn).value();
    Status s = DialHandshake(fd.get(), o.job_key, o.rank, 0, kRendezvousStream, o.size, 0,
                             deadline.Sooner(kPerConnection), coord);
    if (s.code() == StatusCode::kPermissionDenied) return s.WithContext(me);
    if (s.ok()) s = WriteFrame(fd.get(), FrameType::kRegistration, registration, deadline, coord);
    if (s.ok()) {
      registered = true;
      // Rank 0 answers once the last rank registers: this wait may take most of the timeout.
      auto text = ReadFrame(fd.get(), "T", kMaxTable, deadline, coord);
      if (text.ok()) {
        auto table = ParseWorldTable(*text, "the world table from " + coord, o.size);
        if (!table.ok()) return table.status().WithContext(me);
        return table;
      }
      s = text.status();
    }
    last_error = s.message();
    std::this_thread::sleep_for(
        std::min(backoff, std::chrono::milliseconds(deadline.RemainingMs())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  if (registered) {
    return DeadlineExceeded(me + " registered with " + coord + " but the world table did not " +
                            "arrive within " + Ms(o.timeout) +
                            " (rank 0 answers once every rank has registered): " + last_error);
  }
  return DeadlineExceeded(me + " could not reach " + coord + " within " + Ms(o.timeout) + ": " +
                          last_error);
}

}  // namespace

StatusOr<std::vector<RankEntry>> Rendezvous(const RendezvousOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("rendezvous: rank " + std::to_string(options.rank) +
                           " is outside the world of size " + std::to_string(options.size));
  }
  if (options.self.addresses.empty()) {
    return InvalidArgument("rendezvous: rank " + std::to_string(options.rank) +
                           " has no candidate address to register");
  }
  const Deadline deadline = Deadline::After(options.timeout);
  if (options.rank == 0) return Serve(options, deadline);
  return Join(options, deadline);
}

}  // namespace korovod
