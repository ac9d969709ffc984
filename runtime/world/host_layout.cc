#include "runtime/world/host_layout.h"

#include <algorithm>
#include <map>

namespace korovod {

HostLayout HostLayoutOf(const std::vector<std::string>& host_per_rank) {
  HostLayout l;
  std::map<std::string, int> index;
  for (int r = 0; r < static_cast<int>(host_per_rank.size()); ++r) {
    auto [it, added] = index.emplace(host_per_rank[r], static_cast<int>(l.hosts.size()));
    if (added) l.hosts.emplace_back();
    l.host_of.push_back(it->second);
    l.hosts[it->second].push_back(r);  // ranks arrive ascending
  }
  return l;
}

bool HostLayout::homogeneous() const {
  return std::all_of(hosts.begin(), hosts.end(),
                     [&](const std::vector<int>& h) { return h.size() == hosts.front().size(); });
}

bool HostLayout::contiguous() const {
  for (const std::vector<int>& h : hosts) {
    if (h.back() - h.front() + 1 != static_cast<int>(h.size())) return false;
  }
  return true;
}

std::vector<int> HostLayout::HostFirst() const {
  std::vector<int> first;
  for (const std::vector<int>& h : hosts) first.push_back(h.front());
  first.push_back(static_cast<int>(host_of.size()));
  return first;
}

int HostLayout::local_rank(int rank) const {
  const std::vector<int>& h = hosts[host_of[rank]];
  return static_cast<int>(std::find(h.begin(), h.end(), rank) - h.begin());
}

std::vector<int> HostLayout::CrossRanks(int rank) const {
  const size_t li = static_cast<size_t>(local_rank(rank));
  std::vector<int> out;
  for (const std::vector<int>& h : hosts) {
    if (li < h.size()) out.push_back(h[li]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string HostLayout::Describe() const {
  const std::string n = std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
  if (homogeneous()) {
    const size_t per = hosts.empty() ? 0 : hosts.front().size();
    return n + " x " + std::to_string(per) + (per == 1 ? " rank" : " ranks");
  }
  std::string sizes;
  for (const std::vector<int>& h : hosts) {
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(h.size());
  }
  return n + " of " + sizes + " ranks";
}

StatusOr<HierarchyChoice> ChooseHierarchy(const HostLayout& layout, HierarchyMode mode) {
  if (mode == HierarchyMode::kOff) return HierarchyChoice{false, "turned off"};
  std::string why_not;
  if (layout.hosts.size() < 2) {
    why_not = "one host";
  } else if (!layout.homogeneous()) {
    why_not = layout.Describe() + ": hosts hold different numbers of ranks";
  } else if (layout.hosts.front().size() < 2) {
    why_not = "1 rank per host";
  }
  if (why_not.empty()) return HierarchyChoice{true, layout.Describe()};
  if (mode == HierarchyMode::kOn) {
    return InvalidArgument("hierarchical collectives were asked for, but the world (" +
                           layout.Describe() + ") cannot have them: " + why_not);
  }
  return HierarchyChoice{false, why_not};
}

}  // namespace korovod
