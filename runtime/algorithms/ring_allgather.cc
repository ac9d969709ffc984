#include "runtime/algorithms/algorithms.h"

namespace korovod {

// Step s: send block (r-s), receive block (r-s-1) straight into place.
Status RingAllgather(AlgorithmContext& ctx, std::byte* buf, const BlockLayout& blocks) {
  const int n = ctx.size(), r = ctx.rank();
  auto block = [&](int i) { return ((i % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    const int sb = block(r - s), rb = block(r - s - 1);
    RecvSpec recv;
    recv.peer = ctx.peer(r - 1);
    recv.len = blocks[rb + 1] - blocks[rb];
    recv.dest = buf + blocks[rb];
    KV_RETURN_IF_ERROR(ctx.transport().Exchange(
        {ctx.peer(r + 1), buf + blocks[sb], blocks[sb + 1] - blocks[sb]}, recv, ctx.deadline));
  }
  return OkStatus();
}

}  // namespace korovod
