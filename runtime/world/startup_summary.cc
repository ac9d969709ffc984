#include "runtime/world/startup_summary.h"

#include <algorithm>
#include <cstdio>

namespace korovod {
namespace {

std::string Rate(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB/s", bytes_per_second / 1e9);
  return buf;
}

// The far end's interface: as that rank registered it, else (same host) as ours names it.
std::string RemoteIface(const Communicator& comm, int peer, const std::string& ip,
                        const std::vector<NetInterface>& interfaces) {
  const auto& ranks = comm.options().ranks;
  if (peer < static_cast<int>(ranks.size())) {
    for (const CandidateAddress& a : ranks[peer].addresses) {
      if (a.host == ip && !a.iface.empty()) return a.iface;
    }
  }
  const std::string local = InterfaceOf(interfaces, ip);
  return local.empty() ? "?" : local;
}

std::string HostOf(const Communicator& comm, int peer) {
  const auto& hosts = comm.options().hosts;  // korovodrun's virtual hosts
  if (peer < static_cast<int>(hosts.size())) return hosts[peer];
  const auto& ranks = comm.options().ranks;
  if (peer < static_cast<int>(ranks.size())) return ranks[peer].host_name;
  return comm.peer(peer).host;
}

}  // namespace

std::string FormatStartupSummary(const Communicator& comm, const std::vector<LinkRate>& rates,
                                 const std::vector<NetInterface>& interfaces,
                                 const std::string& host_name) {
  const int r = comm.rank();
  const auto& hosts = comm.options().hosts;  // a virtual host names this rank's host
  std::string line = "korovod: rank " + std::to_string(r) + "/" + std::to_string(comm.size()) +
                     " host " + (r < static_cast<int>(hosts.size()) ? hosts[r] : host_name);
  const int port = comm.peer(r).port;
  if (rates.empty()) {
    return line + " port " + std::to_string(port) + " transport " + comm.transport_name() +
           ": no peers";
  }
  const LinkEnds mine = comm.link_ends(rates.front().peer);
  const std::string iface = InterfaceOf(interfaces, mine.local_ip);
  line += " iface " + (iface.empty() ? std::string("?") : iface) + " addr " +
          (mine.local_ip.empty() ? "?" : mine.local_ip) + ":" + std::to_string(port) +
          " transport " + comm.transport_name() + ":";
  const int next = (r + 1) % comm.size();
  for (size_t i = 0; i < rates.size(); ++i) {
    const int p = rates[i].peer;
    const LinkEnds ends = comm.link_ends(p);
    line += std::string(i == 0 ? " " : ", ") + (p == next ? "next" : "prev") + " rank " +
            std::to_string(p) + " (" + HostOf(comm, p) + ") " +
            (ends.remote_ip.empty() ? "?" : ends.remote_ip) + " (" +
            RemoteIface(comm, p, ends.remote_ip, interfaces) + ") " +
            Rate(rates[i].bytes_per_second);
  }
  // Only where it matters: several hosts, some holding several ranks.
  const HostLayout& layout = comm.host_layout();
  const bool shared_hosts = std::any_of(layout.hosts.begin(), layout.hosts.end(),
                                        [](const std::vector<int>& h) { return h.size() > 1; });
  if (layout.hosts.size() > 1 && shared_hosts) {
    line += std::string("; allreduce ") + (comm.hierarchy().on ? "hierarchical" : "flat") + " (" +
            comm.hierarchy().reason + ")";
  }
  return line;
}

}  // namespace korovod
