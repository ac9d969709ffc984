// Host layout: which ranks share a host, and whether collectives go hierarchical over it.
//
// Hierarchical allreduce splits the world into the ranks of this host (the local set, reached
// over shared memory) and the ranks with this rank's local index on every host (the cross set,
// over TCP): reduce-scatter within the host, allreduce of this rank's block across hosts, allgather
// within the host. Every local rank then carries 1/L of the data across the network, and each
// host's link carries the message once per direction instead of 2(N-1)/N times through the flat
// ring's host-crossing edges. It needs every host to hold the same number of ranks (the cross sets
// must pair local blocks one to one), as Horovod's hierarchical allreduce does.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod {

struct HostLayout {
  std::vector<int> host_of;             // [rank]: index of its host, in order of first rank
  std::vector<std::vector<int>> hosts;  // [host]: its ranks, ascending

  // Every host holds the same number of ranks.
  bool homogeneous() const;
  // Every host's ranks are consecutive (korovodrun's and the operator's placements): host k then
  // holds ranks HostFirst()[k] .. HostFirst()[k + 1] - 1, hosts in rank order.
  bool contiguous() const;
  std::vector<int> HostFirst() const;
  int local_rank(int rank) const;  // index of `rank` among its host's ranks
  int local_size(int rank) const { return static_cast<int>(hosts[host_of[rank]].size()); }
  std::vector<int> LocalRanks(int rank) const { return hosts[host_of[rank]]; }
  // The ranks with `rank`'s local index on every host (homogeneous layouts), ascending.
  std::vector<int> CrossRanks(int rank) const;
  // "2 hosts x 2 ranks", or "3 hosts of 2, 2, 1 ranks".
  std::string Describe() const;
};

// `host_per_rank`: a name per rank; equal names share a host.
HostLayout HostLayoutOf(const std::vector<std::string>& host_per_rank);

// Whether the world goes hierarchical, and why (the start-up line says it):
// {true, "2 hosts x 2 ranks"} or {false, "one host"}, {false, "1 rank per host"},
// {false, "hosts of 2, 1 ranks"}, {false, "turned off"}. kOn on a layout that cannot is an error
// naming the layout.
struct HierarchyChoice {
  bool on = false;
  std::string reason;
};
StatusOr<HierarchyChoice> ChooseHierarchy(const HostLayout& layout, HierarchyMode mode);

}  // namespace korovod
