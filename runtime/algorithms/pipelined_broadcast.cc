#include <algorithm>

#include "runtime/algorithms/algorithms.h"

namespace korovod {
namespace {

constexpr size_t kTreeMaxBytes = 64 << 10;  // below this, latency (log N hops) dominates
constexpr size_t kChainChunk = 512 << 10;   // pipeline unit along the chain

// Binomial tree rooted at `root`: ceil(log2 N) rounds of the whole message.
Status TreeBroadcast(AlgorithmContext& ctx, std::byte* buf, size_t len, int root) {
  const int n = ctx.size();
  const int vrank = (ctx.rank() - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      KV_RETURN_IF_ERROR(ctx.Recv(root + vrank - mask, buf, len));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < n) KV_RETURN_IF_ERROR(ctx.Send(root + vrank + mask, buf, len));
  }
  return OkStatus();
}

// Chain root -> root+1 -> ... in chunks: each relay receives chunk c while forwarding chunk c-1,
// so the whole chain moves ~len bytes per rank in about (chunks + N - 2) chunk times. Every rank
// cuts the message into the same chunks: a transport may lay a message out by its length (TCP
// stripes it), so sender and receiver must agree on every message's boundaries.
Status ChainBroadcast(AlgorithmContext& ctx, std::byte* buf, size_t len, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const int pos = (r - root + n) % n;
  const bool has_next = pos<n - 1, has_prev = pos> 0;
  const size_t chunks = (len + kChainChunk - 1) / kChainChunk;
  auto chunk_len = [&](size_t c) { return std::min(kChainChunk, len - c * kChainChunk); };
  for (size_t c = 0; c <= chunks; ++c) {
    SendSpec send;
    RecvSpec recv;
    // The root has every chunk already: it forwards chunk c at step c; relays forward c-1.
    const size_t fwd = has_prev ? c - 1 : c;
    if (has_next && (has_prev ? c > 0 : c < chunks)) {
      send = {ctx.peer(r + 1), buf + fwd * kChainChunk, chunk_len(fwd)};
    }
    if (has_prev && c < chunks) {
      recv.peer = ctx.peer(r - 1);
      recv.len = chunk_len(c);
      recv.dest = buf + c * kChainChunk;
    }
    if (send.peer < 0 && recv.peer < 0) continue;
    KV_RETURN_IF_ERROR(ctx.transport().Exchange(send, recv, ctx.deadline));
  }
  return OkStatus();
}

}  // namespace

Status Broadcast(AlgorithmContext& ctx, std::byte* buf, size_t len, int root) {
  if (ctx.size() == 1 || len == 0) return OkStatus();
  if (len < kTreeMaxBytes || ctx.size() == 2) {
    PhaseScope phase(ctx, "TREE_BROADCAST");
    return TreeBroadcast(ctx, buf, len, root);
  }
  PhaseScope phase(ctx, "CHAIN_BROADCAST");
  return ChainBroadcast(ctx, buf, len, root);
}

}  // namespace korovod
