// The algorithms behind the collectives, one per file (see docs/algorithms.md for the cost of
// each in steps and bytes on the wire). Buffers are in bytes; elements only matter to reductions.
#pragma once

#include "runtime/algorithms/algorithm_context.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {

// Ring reduce-scatter in place: on return, this rank's block (blocks[rank]) holds the reduction
// of that block over the set. N-1 steps, each sending one block and reducing the received one
// as it arrives.
Status RingReduceScatter(AlgorithmContext& ctx, std::byte* buf, const BlockLayout& blocks,
                         DataType type, ReduceOp op);

// Ring allgather in place: this rank's block is valid on entry, every block on return.
Status RingAllgather(AlgorithmContext& ctx, std::byte* buf, const BlockLayout& blocks);

// Bandwidth-optimal allreduce: ring reduce-scatter, post-scale of the owned block, ring
// allgather. 2(N-1) steps, 2(N-1)/N of the message per rank on the wire.
// `postscale` and `divisor` as ScaleInPlace's (Average divides by the set size).
Status RingAllreduce(AlgorithmContext& ctx, std::byte* buf, size_t count, DataType type,
                     ReduceOp op, double postscale, int divisor = 1);

// Latency-optimal allreduce: ceil(log2 N) full-message exchanges (+2 for non-powers of two).
Status RecursiveDoublingAllreduce(AlgorithmContext& ctx, std::byte* buf, size_t count,
                                  DataType type, ReduceOp op, double postscale, int divisor = 1);

// One-host allreduce through the peers' shared windows: in pieces of half a window, each rank
// copies its input into its window once, reduces its block reading every peer's window in place
// and copies every block out of its owner's window. 2 barriers per piece and 1 at the end; per
// rank 2 copies of the message plus the reduction of 1/N of it, whatever N (the ring's slots
// cost 2(N-1)/N of the message in copies in and out of slots, plus a reduction of (N-1)/N).
// `in` may equal `out`. Prescale applies to the input, postscale and `divisor` to the result.
Status SharedMemoryAllreduce(AlgorithmContext& ctx, SharedWindows& windows, const std::byte* in,
                             std::byte* out, size_t count, DataType type, ReduceOp op,
                             double prescale, double postscale, int divisor = 1);

// Broadcast from set rank `root`: binomial tree for small messages, pipelined chain for large.
Status Broadcast(AlgorithmContext& ctx, std::byte* buf, size_t len, int root);

// Pairwise alltoall: N-1 steps, step k sends to rank+k and receives from rank-k.
Status PairwiseAlltoall(AlgorithmContext& ctx, const std::byte* in, const BlockLayout& send_blocks,
                        std::byte* out, const BlockLayout& recv_blocks);

// Dissemination barrier: ceil(log2 N) rounds of one-byte messages.
Status DisseminationBarrier(AlgorithmContext& ctx);

}  // namespace korovod
