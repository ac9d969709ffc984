#include <cstring>

#include "runtime/algorithms/algorithms.h"

namespace korovod {

Status PairwiseAlltoall(AlgorithmContext& ctx, const std::byte* in, const BlockLayout& send_blocks,
                        std::byte* out, const BlockLayout& recv_blocks) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t own = send_blocks[r + 1] - send_blocks[r];
  if (own > 0) std::memmove(out + recv_blocks[r], in + send_blocks[r], own);  // null when empty
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    RecvSpec recv;
    recv.peer = ctx.peer(from);
    recv.len = recv_blocks[from + 1] - recv_blocks[from];
    recv.dest = out + recv_blocks[from];
    KV_RETURN_IF_ERROR(ctx.transport().Exchange(
        {ctx.peer(to), in + send_blocks[to], send_blocks[to + 1] - send_blocks[to]}, recv,
        ctx.deadline));
  }
  return OkStatus();
}

}  // namespace korovod
