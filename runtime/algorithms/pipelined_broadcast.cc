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
// so the whole chain moves ~len bytes per rank in about (chunks + N - 2) chunk times.
Status ChainBroadcast(AlgorithmContext& ctx, std::byte* buf, size_t len, int root) {
  const int n = ctx.size(), r = ctx.rank();
  const int pos = (r - root + n) % n;
  if (pos == 0) return ctx.Send(r + 1, buf, len);
  if (pos == n - 1) return ctx.Recv(r - 1, buf, len);
  const size_t chunks = (len + kChainChunk - 1) / kChainChunk;
  for (size_t c = 0; c <= chunks; ++c) {
    SendSpec send;
    if (c > 0) {
      const size_t off = (c - 1) * kChainChunk;
      send = {ctx.peer(r + 1), buf + off, std::min(kChainChunk, len - off)};
    }
    RecvSpec recv;
    if (c < chunks) {
      const size_t off = c * kChainChunk;
      recv.peer = ctx.peer(r - 1);
      recv.len = std::min(kChainChunk, len - off);
      recv.dest = buf + off;
    }
    KV_RETURN_IF_ERROR(ctx.transport().Exchange(send, recv, ctx.deadline));
  }
  return OkStatus();
}

}  // namespace

Status Broadcast(AlgorithmContext& ctx, std::byte* buf, size_t len, int root) {
  if (ctx.size() == 1 || len == 0) return OkStatus();
  if (len < kTreeMaxBytes || ctx.size() == 2) return TreeBroadcast(ctx, buf, len, root);
  return ChainBroadcast(ctx, buf, len, root);
}

}  // namespace korovod
