// Tensor Fusion planning: which responses run as one collective. Every rank plans the same list
// with the same threshold, so every rank runs the same collectives.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/negotiation_messages.h"

namespace korovod {

struct FusedOp {
  std::vector<int> responses;  // indices into the planned list, in execution order
  uint64_t bytes = 0;          // fusion buffer bytes (allgather: the gathered output)
};

// Allreduces of one dtype, op and scaling, and allgathers of one dtype (each with the same absent
// ranks, so one divisor and one row layout serve the whole buffer), are packed in list order
// up to `threshold_bytes` (0: no fusion), looking ahead past responses that do not match. Each
// tensor starts at a 64-byte boundary in the buffer. Everything else runs alone.
// Tensors of at least `tensor_max_bytes` (0: no limit) are not packed: staging them would cost two
// copies for no saved latency; they run alone, in place.
std::vector<FusedOp> PlanFusion(const std::vector<Response>& responses, int64_t threshold_bytes,
                                int64_t tensor_max_bytes = 0);

// Bytes a response occupies in a fusion buffer (padded to 64 bytes).
uint64_t FusionBytes(const Response& r);
constexpr uint64_t kFusionAlign = 64;

}  // namespace korovod
