#include "runtime/algorithms/algorithms.h"

namespace korovod {

Status HierarchicalBroadcast(AlgorithmContext* root_cross, AlgorithmContext& local, std::byte* buf,
                             size_t len, int cross_root, int local_root) {
  if (root_cross != nullptr && root_cross->size() > 1) {
    PhaseScope phase(*root_cross, "HIERARCHICAL_CROSS_BROADCAST");
    KV_RETURN_IF_ERROR(Broadcast(*root_cross, buf, len, cross_root));
  }
  if (local.size() == 1) return OkStatus();
  PhaseScope phase(local, "HIERARCHICAL_LOCAL_BROADCAST");
  return Broadcast(local, buf, len, local_root);
}

}  // namespace korovod
