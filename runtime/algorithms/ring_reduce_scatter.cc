#include "runtime/algorithms/algorithms.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {

BlockLayout EvenBlocks(size_t count, int n, size_t elem_size) {
  BlockLayout b(n + 1);
  const size_t base = count / n, extra = count % n;
  b[0] = 0;
  for (int i = 0; i < n; ++i) {
    b[i + 1] = b[i] + (base + (static_cast<size_t>(i) < extra ? 1 : 0)) * elem_size;
  }
  return b;
}

BlockLayout BlocksOf(const size_t* counts, int n, size_t elem_size) {
  BlockLayout b(n + 1);
  b[0] = 0;
  for (int i = 0; i < n; ++i) b[i + 1] = b[i] + counts[i] * elem_size;
  return b;
}

// Step s: send block (r-s-1), receive block (r-s-2) and reduce it as it arrives; the block sent
// at step s is the one completed at step s-1, so after N-1 steps block r is complete here.
Status RingReduceScatter(AlgorithmContext& ctx, std::byte* buf, const BlockLayout& blocks,
                         DataType type, ReduceOp op) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t esize = DataTypeSize(type);
  auto block = [&](int i) { return ((i % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    const int sb = block(r - s - 1), rb = block(r - s - 2);
    std::byte* acc = buf + blocks[rb];
    auto reduce = [&](size_t off, const std::byte* data, size_t len) {
      ReduceInto(acc + off, data, len / esize, type, op);
    };
    RecvConsumer consume(reduce);
    RecvSpec recv;
    recv.peer = ctx.peer(r - 1);
    recv.len = blocks[rb + 1] - blocks[rb];
    recv.consume = &consume;
    recv.align = esize;
    KV_RETURN_IF_ERROR(ctx.transport().Exchange(
        {ctx.peer(r + 1), buf + blocks[sb], blocks[sb + 1] - blocks[sb]}, recv, ctx.deadline));
  }
  return OkStatus();
}

}  // namespace korovod
