#include "runtime/world/link_probe.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace korovod {
namespace {

constexpr size_t kWarmupBytes = 64 << 10;  // opens the TCP windows before timing
constexpr int kTimedRounds = 3;

}  // namespace

StatusOr<std::vector<LinkRate>> ProbeRingLinks(Communicator& comm, size_t bytes,
                                               Deadline deadline) {
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1 || bytes == 0) return std::vector<LinkRate>{};
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto send = std::make_unique<std::byte[]>(bytes);
  auto recv = std::make_unique_for_overwrite<std::byte[]>(bytes);
  std::memset(send.get(), 0x5a, bytes);
  // One ring step: send `len` to `to` while receiving `len` from `from`; seconds taken.
  auto step = [&](int to, int from, size_t len) -> StatusOr<double> {
    const auto t0 = Clock::now();
    Status s = comm.transport().Exchange({to, send.get(), len}, {from, len, recv.get()}, deadline);
    if (!s.ok()) return comm.MarkBroken(s.WithContext("link probe"));
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<LinkRate> rates;
  // In a world of 2 the next and previous neighbour are the same rank: one direction pair.
  for (int to : n == 2 ? std::vector<int>{next} : std::vector<int>{next, prev}) {
    const int from = to == next ? prev : next;
    KV_RETURN_IF_ERROR(step(to, from, std::min(bytes, kWarmupBytes)).status());
    double best = 0;
    for (int i = 0; i < kTimedRounds; ++i) {
      KV_ASSIGN_OR_RETURN(double seconds, step(to, from, bytes));
      best = i == 0 ? seconds : std::min(best, seconds);
    }
    rates.push_back({to, best > 0 ? static_cast<double>(bytes) / best : 0.0});
  }
  return rates;
}

}  // namespace korovod
