#include "operator/controller/worker_ports.h"

namespace korovod::k8s_operator {
namespace {

// FNV-1a: stable across builds and platforms, unlike std::hash.
uint64_t Fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

WorkerPorts PortsFor(std::string_view world_id, int64_t rank, bool host_network,
                     const OperatorSettings& settings) {
  if (!host_network) {
    return WorkerPorts{settings.coordinator_port, settings.metrics_port, kTorchStorePort};
  }
  const int64_t min = settings.host_network_port_min;
  const int64_t span = settings.host_network_port_max - min + 1;
  const int64_t base = static_cast<int64_t>(Fnv1a(world_id) % static_cast<uint64_t>(span));
  return WorkerPorts{static_cast<int>(min + base),
                     static_cast<int>(min + (base + 1 + rank % (span - 1)) % span),
                     static_cast<int>(min + (base + span - 1) % span)};
}

}  // namespace korovod::k8s_operator
