// SetState: what the engine remembers about one process set on this rank: its ops in flight, its
// response cache, and, on set rank 0, its coordinator and stall inspector. Background thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/core/coordinator.h"
#include "runtime/core/pending_op.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/stall_inspector.h"
#include "runtime/world/communicator.h"
#include "runtime/world/process_set.h"

namespace korovod {

struct SetState {
  int id = 0;
  ProcessSet set;
  ResponseCache cache;
  std::unordered_map<std::string, std::unique_ptr<PendingOp>> pending;
  std::vector<PendingOp*> unsent;  // to report to the coordinator, in submission order
  std::vector<int> invalid_bits;   // cache entries this rank found stale this cycle
  bool joined = false;
  std::unique_ptr<StallInspector> stall;     // set rank 0 only
  std::unique_ptr<Coordinator> coordinator;  // set rank 0 only
  // Reused negotiation buffers.
  std::vector<uint64_t> state, all_states;
  std::vector<std::byte> payloads;

  SetState(int id_, ProcessSet s, int cache_capacity)
      : id(id_), set(std::move(s)), cache(cache_capacity) {}

  // "rank 3 (10.0.0.3:5000)" for a rank of this set, in error messages.
  std::string DescribeRank(const Communicator& comm, int set_rank) const {
    return comm.DescribePeer(set.global_rank(set_rank));
  }

  // Cache entry `bit` left the cache (stale or evicted): this rank's ops on it are negotiated
  // afresh.
  void Renegotiate(int bit) {
    for (auto& [name, op] : pending) {
      if (op->cache_bit == bit) {
        op->cache_bit = -1;
        unsent.push_back(op.get());
      }
    }
  }
};

}  // namespace korovod
