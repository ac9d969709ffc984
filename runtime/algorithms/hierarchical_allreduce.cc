#include "runtime/algorithms/algorithms.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {

Status HierarchicalAllreduce(AlgorithmContext& local, AlgorithmContext& cross, std::byte* buf,
                             size_t count, DataType type, ReduceOp op, double postscale,
                             int divisor, size_t cross_small_max) {
  const size_t esize = DataTypeSize(type);
  const BlockLayout blocks = EvenBlocks(count, local.size(), esize);
  const int lr = local.rank();
  std::byte* block = buf + blocks[lr];
  const size_t block_count = (blocks[lr + 1] - blocks[lr]) / esize;
  if (local.size() > 1) {
    PhaseScope phase(local, "HIERARCHICAL_LOCAL_REDUCE_SCATTER");
    KV_RETURN_IF_ERROR(RingReduceScatter(local, buf, blocks, type, op));
  }
  if (cross.size() == 1) {
    ScaleInPlace(block, block_count, type, postscale, divisor);
  } else if (block_count > 0) {
    PhaseScope phase(cross, "HIERARCHICAL_CROSS_ALLREDUCE");
    // Every rank of a cross set holds the same block, so they agree on the algorithm.
    if (block_count * esize <= cross_small_max) {
      KV_RETURN_IF_ERROR(
          RecursiveDoublingAllreduce(cross, block, block_count, type, op, postscale, divisor));
    } else {
      KV_RETURN_IF_ERROR(RingAllreduce(cross, block, block_count, type, op, postscale, divisor));
    }
  }
  if (local.size() == 1) return OkStatus();
  PhaseScope phase(local, "HIERARCHICAL_LOCAL_ALLGATHER");
  return RingAllgather(local, buf, blocks);
}

}  // namespace korovod
