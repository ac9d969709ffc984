#include <cstring>
#include <utility>

#include "runtime/algorithms/algorithms.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {

// Non-powers of two: the first 2*rem ranks pair up, even ones hand their vector to the odd
// neighbour and sit out; the remaining p2 ranks run log2(p2) exchange rounds; the sitters get the
// result back. IEEE + and * are commutative, so partners that combine the same two partials get
// the same bits.
Status RecursiveDoublingAllreduce(AlgorithmContext& ctx, std::byte* buf, size_t count,
                                  DataType type, ReduceOp op, double postscale, int divisor) {
  const int n = ctx.size(), r = ctx.rank();
  const size_t esize = DataTypeSize(type);
  const size_t bytes = count * esize;
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  std::byte* scratch = ctx.comm.Scratch(0, bytes);

  int vrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      KV_RETURN_IF_ERROR(ctx.Send(r + 1, buf, bytes));
      vrank = -1;
    } else {
      // Nothing is being sent from buf here, so the neighbour's vector is reduced in place.
      auto fn = [&](size_t off, const std::byte* data, size_t len) {
        ReduceInto(buf + off, data, len / esize, type, op);
      };
      RecvConsumer consume(fn);
      RecvSpec recv{ctx.peer(r - 1), bytes, nullptr, &consume, esize};
      KV_RETURN_IF_ERROR(ctx.transport().Exchange({}, recv, ctx.deadline));
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }

  if (vrank >= 0) {
    std::byte* cur = buf;
    std::byte* next = scratch;
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      // Reduce the partner's bytes with ours into the other buffer while ours is still being
      // sent, then swap.
      auto fn = [&](size_t off, const std::byte* data, size_t len) {
        ReduceTo(next + off, cur + off, data, len / esize, type, op);
      };
      RecvConsumer consume(fn);
      RecvSpec recv{ctx.peer(peer), bytes, nullptr, &consume, esize};
      KV_RETURN_IF_ERROR(
          ctx.transport().Exchange({ctx.peer(peer), cur, bytes}, recv, ctx.deadline));
      std::swap(cur, next);
    }
    if (cur != buf) std::memcpy(buf, cur, bytes);
    ScaleInPlace(buf, count, type, postscale, divisor);
    if (r < 2 * rem) KV_RETURN_IF_ERROR(ctx.Send(r - 1, buf, bytes));
  } else {
    KV_RETURN_IF_ERROR(ctx.Recv(r + 1, buf, bytes));
  }
  return OkStatus();
}

}  // namespace korovod
