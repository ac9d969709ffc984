#include "runtime/core/clock_sync.h"

#include <limits>

namespace korovod {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusOr<int64_t> MeasureClockOffset(Communicator& comm, int rounds, Deadline deadline) {
  Transport& t = comm.transport();
  auto bytes = [](int64_t& v) { return reinterpret_cast<std::byte*>(&v); };
  if (comm.rank() == 0) {
    for (int peer = 1; peer < comm.size(); ++peer) {
      int64_t best_rtt = std::numeric_limits<int64_t>::max();
      int64_t offset = 0;
      for (int i = 0; i < rounds; ++i) {
        int64_t ping = NowNs();
        int64_t theirs = 0;
        KV_RETURN_IF_ERROR(t.Exchange({peer, bytes(ping), sizeof(ping)}, {}, deadline));
        RecvSpec r;
        r.peer = peer;
        r.len = sizeof(theirs);
        r.dest = bytes(theirs);
        KV_RETURN_IF_ERROR(t.Exchange({}, r, deadline));
        const int64_t back = NowNs();
        if (back - ping < best_rtt) {
          best_rtt = back - ping;
          offset = theirs - (ping + back) / 2;
        }
      }
      KV_RETURN_IF_ERROR(t.Exchange({peer, bytes(offset), sizeof(offset)}, {}, deadline));
    }
    return int64_t{0};
  }
  for (int i = 0; i < rounds; ++i) {
    int64_t ping = 0;
    RecvSpec r;
    r.peer = 0;
    r.len = sizeof(ping);
    r.dest = bytes(ping);
    KV_RETURN_IF_ERROR(t.Exchange({}, r, deadline));
    int64_t now = NowNs();
    KV_RETURN_IF_ERROR(t.Exchange({0, bytes(now), sizeof(now)}, {}, deadline));
  }
  int64_t offset = 0;
  RecvSpec r;
  r.peer = 0;
  r.len = sizeof(offset);
  r.dest = bytes(offset);
  KV_RETURN_IF_ERROR(t.Exchange({}, r, deadline));
  return offset;
}

}  // namespace korovod
