#include "runtime/algorithms/algorithms.h"

namespace korovod {

Status HierarchicalAllgather(AlgorithmContext& local, AlgorithmContext* leaders, std::byte* buf,
                             const BlockLayout& blocks, const std::vector<int>& host_first) {
  const int hosts = static_cast<int>(host_first.size()) - 1;
  // This host's ranks are host_first[h] .. host_first[h + 1] - 1: find h from this rank's block.
  const int me = local.set.global_rank(local.rank());
  int h = 0;
  while (host_first[h + 1] <= me) ++h;
  const size_t begin = blocks[host_first[h]], end = blocks[host_first[h + 1]];
  if (local.size() > 1) {
    BlockLayout mine;
    for (int r = host_first[h]; r <= host_first[h + 1]; ++r) mine.push_back(blocks[r] - begin);
    PhaseScope phase(local, "HIERARCHICAL_LOCAL_ALLGATHER");
    KV_RETURN_IF_ERROR(RingAllgather(local, buf + begin, mine));
  }
  if (leaders != nullptr && leaders->size() > 1) {
    BlockLayout per_host;
    for (int k = 0; k <= hosts; ++k) per_host.push_back(blocks[host_first[k]]);
    PhaseScope phase(*leaders, "HIERARCHICAL_CROSS_ALLGATHER");
    KV_RETURN_IF_ERROR(RingAllgather(*leaders, buf, per_host));
  }
  if (local.size() == 1) return OkStatus();
  PhaseScope phase(local, "HIERARCHICAL_LOCAL_BROADCAST");
  // The other hosts' blocks, from the leader (local rank 0): before this host's, then after.
  if (begin > 0) KV_RETURN_IF_ERROR(Broadcast(local, buf, begin, 0));
  if (end < blocks.back()) KV_RETURN_IF_ERROR(Broadcast(local, buf + end, blocks.back() - end, 0));
  return OkStatus();
}

}  // namespace korovod
