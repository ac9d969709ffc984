#include <algorithm>
#include <cstring>

#include "runtime/algorithms/algorithms.h"

namespace korovod {

namespace {

// Pieces small enough that a piece copied in is still in cache when it is reduced and gathered
// (measured on 2-core EPYC VMs: 256 KiB beat 64 KiB to 16 MiB through the windows, 1.2-1.6x over
// 1 MiB at 64 MiB). A piece reduced in place costs only a barrier: larger pieces, fewer barriers.
constexpr size_t kWindowPieceBytes = size_t{256} << 10;
constexpr size_t kDirectPieceBytes = size_t{1} << 20;

// Every rank's input and output lie in memory all ranks map (tensors in the sidecars' arenas, a
// fusion buffer built in the window): per piece, rank r reduces block r reading every input in
// place into its own output, then copies the other blocks out of their owners' outputs. No copy
// in at all, and one barrier per piece: piece k+1's reduction touches none of piece k's bytes.
Status ReduceInPlace(AlgorithmContext& ctx, SharedWindows& windows,
                     const std::vector<std::byte*>& ins, const std::vector<std::byte*>& outs,
                     size_t count, DataType type, ReduceOp op, double postscale, int divisor) {
  const size_t esize = DataTypeSize(type);
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t piece_max = std::max<size_t>(kDirectPieceBytes / esize, 1);
  for (size_t done = 0; done < count;) {
    const size_t len = std::min(piece_max, count - done);
    const size_t at = done * esize;
    const BlockLayout blocks = EvenBlocks(len, n, esize);
    {
      PhaseScope phase(ctx, "SHM_REDUCE");
      const size_t b = at + blocks[r];
      const size_t block_count = (blocks[r + 1] - blocks[r]) / esize;
      if (block_count > 0) {
        // One rank computes each block, in one order: every rank then copies the same bits.
        std::byte* dst = outs[r] + b;
        ReduceTo(dst, ins[r] + b, ins[(r + 1) % n] + b, block_count, type, op);
        for (int k = 2; k < n; ++k) ReduceInto(dst, ins[(r + k) % n] + b, block_count, type, op);
        ScaleInPlace(dst, block_count, type, postscale, divisor);
      }
    }
    // The piece is reduced, and no rank still reads an input this rank is about to overwrite.
    KV_RETURN_IF_ERROR(windows.Barrier(ctx.set.ranks(), ctx.deadline));
    {
      PhaseScope phase(ctx, "SHM_GATHER");
      for (int k = 1; k < n; ++k) {
        const int q = (r + k) % n;
        std::memcpy(outs[r] + at + blocks[q], outs[q] + at + blocks[q], blocks[q + 1] - blocks[q]);
      }
    }
    done += len;
  }
  // No rank returns (and lets its trainer reuse the output) while a peer still gathers from it.
  return windows.Barrier(ctx.set.ranks(), ctx.deadline);
}

// Each piece: every rank copies its input into its own window; each rank reduces its block of
// the piece reading every peer's window in place; every rank copies the reduced blocks out of
// the owners' windows. The window's two halves alternate between pieces, so a rank may copy in
// piece k+1 while a slower peer still reads piece k: the barrier after copy-in k+1 is what lets
// anyone write half k%2 again (at k+2), and by then every rank has finished gathering piece k.
Status ThroughWindows(AlgorithmContext& ctx, SharedWindows& windows, const std::byte* in,
                      std::byte* out, size_t count, DataType type, ReduceOp op, double prescale,
                      double postscale, int divisor) {
  const size_t esize = DataTypeSize(type);
  const int n = ctx.size();
  const int r = ctx.rank();
  const std::vector<int>& ranks = ctx.set.ranks();
  const size_t half = std::min(windows.window_bytes() / 2, kWindowPieceBytes);
  const size_t piece_max = half / esize;
  if (piece_max == 0) {
    return FailedPrecondition("the shared-memory window (" +
                              std::to_string(windows.window_bytes()) +
                              " bytes) is too small for one element");
  }
  std::byte* mine = windows.window(ctx.peer(r));
  if (in + count * esize > mine && in < mine + windows.window_bytes()) {
    // Only a fusion buffer lives in a window, and every rank then reduces in place.
    return Internal("an allreduce input inside this rank's window cannot go through it");
  }
  size_t done = 0;
  for (int piece = 0; done < count; ++piece) {
    const size_t len = std::min(piece_max, count - done);
    const size_t h = static_cast<size_t>(piece % 2) * half;
    {
      PhaseScope phase(ctx, "SHM_COPY_IN");
      std::memcpy(mine + h, in + done * esize, len * esize);
      ScaleInPlace(mine + h, len, type, prescale);
    }
    KV_RETURN_IF_ERROR(windows.Barrier(ranks, ctx.deadline));
    const BlockLayout blocks = EvenBlocks(len, n, esize);
    {
      PhaseScope phase(ctx, "SHM_REDUCE");
      std::byte* block = mine + h + blocks[r];
      const size_t block_count = (blocks[r + 1] - blocks[r]) / esize;
      // One rank computes each block, in one order: every rank then copies the same bits.
      for (int k = 1; k < n && block_count > 0; ++k) {
        ReduceInto(block, windows.window(ctx.peer(r + k)) + h + blocks[r], block_count, type, op);
      }
      ScaleInPlace(block, block_count, type, postscale, divisor);
    }
    KV_RETURN_IF_ERROR(windows.Barrier(ranks, ctx.deadline));
    {
      PhaseScope phase(ctx, "SHM_GATHER");
      std::byte* dst = out + done * esize;
      for (int k = 0; k < n; ++k) {
        const int q = (r + k) % n;
        std::memcpy(dst + blocks[q], windows.window(ctx.peer(q)) + h + blocks[q],
                    blocks[q + 1] - blocks[q]);
      }
    }
    done += len;
  }
  // No rank may write its window for the next collective while a peer still gathers from it.
  return windows.Barrier(ranks, ctx.deadline);
}

}  // namespace

Status SharedMemoryAllreduce(AlgorithmContext& ctx, SharedWindows& windows, const std::byte* in,
                             std::byte* out, size_t count, DataType type, ReduceOp op,
                             double prescale, double postscale, int divisor) {
  const size_t bytes = count * DataTypeSize(type);
  // Prescaling in place would change an input the trainer still owns: such ops copy in.
  SharedWindows::Location in_at, out_at;
  const bool here =
      prescale == 1.0 && windows.Locate(in, bytes, &in_at) && windows.Locate(out, bytes, &out_at);
  windows.Post(0, in_at, here);
  windows.Post(1, out_at, here);
  // Every rank sees every rank's posts: they agree on the path.
  KV_RETURN_IF_ERROR(windows.Barrier(ctx.set.ranks(), ctx.deadline));
  const int n = ctx.size();
  std::vector<std::byte*> ins(n), outs(n);
  bool all_here = true;
  for (int q = 0; q < n && all_here; ++q) {
    SharedWindows::Location a, b;
    const int g = ctx.peer(q);
    all_here = windows.Read(g, 0, &a) && windows.Read(g, 1, &b);
    if (all_here) {
      ins[q] = windows.Resolve(g, a);
      outs[q] = windows.Resolve(g, b);
    }
  }
  if (all_here) return ReduceInPlace(ctx, windows, ins, outs, count, type, op, postscale, divisor);
  return ThroughWindows(ctx, windows, in, out, count, type, op, prescale, postscale, divisor);
}

}  // namespace korovod
