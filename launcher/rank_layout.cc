#include "launcher/rank_layout.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>

namespace korovod::launcher {

StatusOr<std::vector<HostSlots>> ParseHostList(const std::string& text) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  if (text.empty()) return InvalidArgument("-H needs host:slots[,host:slots...]");
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t colon = item.rfind(':');
    if (item.empty() || colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
      return InvalidArgument("-H entry '" + item + "' is not host:slots (e.g. localhost:4)");
    }
    std::string host = item.substr(0, colon);
    std::string slots_text = item.substr(colon + 1);
    char* end = nullptr;
    errno = 0;
    long slots = std::strtol(slots_text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || slots < 1 || slots > 1000000 ||
        !std::isdigit(static_cast<unsigned char>(slots_text[0]))) {
      return InvalidArgument("-H entry '" + item + "': slots must be a whole number of at least 1");
    }
    if (!seen.insert(host).second) {
      return InvalidArgument("-H lists host '" + host + "' more than once");
    }
    hosts.push_back({host, static_cast<int>(slots)});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return hosts;
}

StatusOr<std::vector<RankPlacement>> ComputeRankLayout(const std::vector<HostSlots>& hosts,
                                                       int num_proc) {
  if (num_proc < 1) return InvalidArgument("-np must be at least 1");
  long total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  if (total < num_proc) {
    return InvalidArgument("-np " + std::to_string(num_proc) + " needs " +
                           std::to_string(num_proc) + " slots but -H offers only " +
                           std::to_string(total));
  }
  // Ranks fill hosts in order.
  std::vector<int> per_host;  // ranks on each used host
  std::vector<RankPlacement> layout;
  int rank = 0;
  for (const HostSlots& h : hosts) {
    if (rank == num_proc) break;
    int n = std::min(h.slots, num_proc - rank);
    for (int l = 0; l < n; ++l, ++rank) {
      RankPlacement p;
      p.rank = rank;
      p.size = num_proc;
      p.host = h.host;
      p.local_rank = l;
      p.cross_rank = static_cast<int>(per_host.size());  // fixed below
      layout.push_back(p);
    }
    per_host.push_back(n);
  }
  // local_size: ranks on the host. cross_rank: index among the hosts that have this local_rank
  // (hosts are filled in order, so that is the host's index among hosts with more than local_rank
  // ranks); cross_size: how many such hosts.
  for (RankPlacement& p : layout) {
    int host_index = p.cross_rank;
    p.local_size = per_host[static_cast<size_t>(host_index)];
    int cross_rank = 0;
    int cross_size = 0;
    for (size_t h = 0; h < per_host.size(); ++h) {
      if (per_host[h] > p.local_rank) {
        if (static_cast<int>(h) < host_index) ++cross_rank;
        ++cross_size;
      }
    }
    p.cross_rank = cross_rank;
    p.cross_size = cross_size;
  }
  return layout;
}

}  // namespace korovod::launcher
