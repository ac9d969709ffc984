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

// Hierarchical allreduce (runtime/world/host_layout.h): `local` runs over this host's ranks,
// `cross` over the ranks with this rank's local index on every host. Ring reduce-scatter within
// the host, allreduce of this rank's block across hosts (recursive doubling up to
// `cross_small_max` bytes, else the ring; it applies postscale/divisor), ring allgather within the
// host. Every rank ends with the same bits: each block is finished by one cross allreduce and
// copied to the host's other ranks.
Status HierarchicalAllreduce(AlgorithmContext& local, AlgorithmContext& cross, std::byte* buf,
                             size_t count, DataType type, ReduceOp op, double postscale,
                             int divisor, size_t cross_small_max);

// Hierarchical broadcast: from the root across hosts among the ranks with the root's local index
// (`root_cross`, where the root is set rank `cross_root`; null on the ranks outside it), then
// within each host from that local index (`local`, set rank `local_root`).
Status HierarchicalBroadcast(AlgorithmContext* root_cross, AlgorithmContext& local, std::byte* buf,
                             size_t len, int cross_root, int local_root);

// Hierarchical allgather in place, for hosts whose ranks are consecutive: host k holds ranks
// host_first[k] .. host_first[k + 1] - 1 (host_first has hosts + 1 entries), `blocks` is the
// world's layout. Ring allgather within the host, ring allgather of whole hosts' regions among the
// hosts' first ranks (`leaders`, null on the others), then the leader broadcasts the other hosts'
// regions within its host. Each host's link carries the other hosts' data once instead of the flat
// ring's (N-1)/N of everything per host-crossing edge.
Status HierarchicalAllgather(AlgorithmContext& local, AlgorithmContext* leaders, std::byte* buf,
                             const BlockLayout& blocks, const std::vector<int>& host_first);

// Latency-optimal allreduce: ceil(log2 N) full-message exchanges (+2 for non-powers of two).
Status RecursiveDoublingAllreduce(AlgorithmContext& ctx, std::byte* buf, size_t count,
                                  DataType type, ReduceOp op, double postscale, int divisor = 1);

// One-host allreduce through memory every rank maps (SharedWindows): when every rank's input and
// output lie in it (registered shared regions, a fusion buffer built in the window), each rank
// reduces its block of every 1 MiB piece straight from the peers' inputs and copies the other
// blocks from their owners' outputs: no copy in, 1 barrier per piece. Otherwise each 256 KiB
// piece is first copied into the rank's window (2 barriers per piece). Ranks agree on the path
// after a first barrier; a last one keeps every rank until no peer still reads its buffers.
// docs/algorithms.md has the costs. `in` may equal `out`. Prescale applies to the input (and
// forces the copy in), postscale and `divisor` to the result.
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
