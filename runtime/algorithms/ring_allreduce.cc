#include "runtime/algorithms/algorithms.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {

Status RingAllreduce(AlgorithmContext& ctx, std::byte* buf, size_t count, DataType type,
                     ReduceOp op, double postscale, int divisor) {
  const size_t esize = DataTypeSize(type);
  const BlockLayout blocks = EvenBlocks(count, ctx.size(), esize);
  {
    PhaseScope phase(ctx, "RING_REDUCE_SCATTER");
    KV_RETURN_IF_ERROR(RingReduceScatter(ctx, buf, blocks, type, op));
  }
  PhaseScope phase(ctx, "RING_ALLGATHER");
  // Scale only the block this rank owns: 1/N of the work, and every rank then copies the same
  // bits, so results stay identical everywhere.
  const int r = ctx.rank();
  ScaleInPlace(buf + blocks[r], (blocks[r + 1] - blocks[r]) / esize, type, postscale, divisor);
  return RingAllgather(ctx, buf, blocks);
}

}  // namespace korovod
