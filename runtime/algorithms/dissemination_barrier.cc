#include "runtime/algorithms/algorithms.h"

namespace korovod {

Status DisseminationBarrier(AlgorithmContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  std::byte token{1}, got{0};
  for (int k = 1; k < n; k <<= 1) {
    RecvSpec recv;
    recv.peer = ctx.peer(r - k);
    recv.len = 1;
    recv.dest = &got;
    KV_RETURN_IF_ERROR(ctx.transport().Exchange({ctx.peer(r + k), &token, 1}, recv, ctx.deadline));
  }
  return OkStatus();
}

}  // namespace korovod
