#include "runtime/world/preflight.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "runtime/transport/peer_mesh.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

constexpr int kMaxConcurrentProbes = 16;

struct Attempt {
  std::string failure;  // the last failure on this address; empty if never tried
};

std::string Describe(const CandidateAddress& a, uint16_t port) {
  return a.host + ":" + std::to_string(port) + " on " + (a.iface.empty() ? "?" : a.iface);
}

// Tries one peer's candidates round after round until one answers or the deadline passes.
Status ChooseOne(const WorldOptions& o, int peer, Deadline deadline, PeerAddress* chosen) {
  const RankEntry& entry = o.ranks[peer];
  const std::string me = DescribeRank(o.ranks, o.rank);
  const std::string them = DescribeRank(o.ranks, peer);
  std::vector<Attempt> attempts(entry.addresses.size());
  auto pause = std::chrono::milliseconds(100);
  while (true) {
    for (size_t i = 0; i < entry.addresses.size() && !deadline.Expired(); ++i) {
      const CandidateAddress& a = entry.addresses[i];
      const PeerAddress addr{a.host, entry.port};
      const Deadline attempt(std::min(deadline.at(), Clock::now() + o.probe_attempt_timeout));
      Status s = PeerMesh::Probe(addr, o.job_key, o.epoch, o.rank, peer,
                                 static_cast<int>(o.ranks.size()), attempt, deadline);
      if (s.ok()) {
        *chosen = addr;
        return OkStatus();
      }
      if (s.code() == StatusCode::kPermissionDenied) {
        return PermissionDenied(me + ": preflight to " + them + " at " + Describe(a, entry.port) +
                                ": " + s.message());
      }
      attempts[i].failure = s.message();
    }
    if (deadline.Expired()) break;
    std::this_thread::sleep_for(std::min(pause, std::chrono::milliseconds(deadline.RemainingMs())));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
  std::string tried;
  for (size_t i = 0; i < attempts.size(); ++i) {
    tried += (tried.empty() ? "" : "; ") + Describe(entry.addresses[i], entry.port) + ": " +
             (attempts[i].failure.empty() ? "not tried before the deadline" : attempts[i].failure);
  }
  return Unavailable(me + " cannot reach " + them + " before the start deadline (tried " + tried +
                     ")");
}

}  // namespace

Status ChooseDialAddresses(const WorldOptions& options, std::vector<PeerAddress>& peers,
                           Deadline deadline) {
  if (options.ranks.size() != peers.size()) {
    return InvalidArgument("WorldOptions.ranks has " + std::to_string(options.ranks.size()) +
                           " entries for a world of " + std::to_string(peers.size()));
  }
  const int n = options.rank;  // peers to probe: 0 .. rank-1
  std::vector<Status> results(n);
  std::vector<PeerAddress> chosen(peers.begin(), peers.begin() + n);
  std::atomic<int> next{0};
  {
    std::vector<std::jthread> workers;
    for (int w = 0; w < std::min(n, kMaxConcurrentProbes); ++w) {
      workers.emplace_back([&] {
        for (int p = next++; p < n; p = next++) {
          results[p] = ChooseOne(options, p, deadline, &chosen[p]);
        }
      });
    }
  }  // joined here
  // Report the lowest unreachable rank in full, and name the others.
  Status first;
  std::string others;
  for (int p = 0; p < n; ++p) {
    if (results[p].ok()) continue;
    if (first.ok()) {
      first = results[p];
    } else {
      others += (others.empty() ? "" : ", ") + DescribeRank(options.ranks, p);
    }
  }
  if (!first.ok()) {
    return others.empty()
               ? first
               : Status(first.code(), first.message() + " (also unreachable: " + others + ")");
  }
  for (int p = 0; p < n; ++p) peers[p] = chosen[p];
  return OkStatus();
}

}  // namespace korovod
