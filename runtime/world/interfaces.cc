#include "runtime/world/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace korovod {

StatusOr<std::vector<NetInterface>> ListInterfaces() {
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) != 0) return ErrnoStatus(StatusCode::kInternal, "getifaddrs", errno);
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> list(raw, &::freeifaddrs);
  std::vector<NetInterface> out;
  std::vector<std::string> named;  // interfaces seen, in order
  for (ifaddrs* a = raw; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    NetInterface i;
    i.name = a->ifa_name;
    i.up = (a->ifa_flags & IFF_UP) != 0;
    i.running = (a->ifa_flags & IFF_RUNNING) != 0;
    i.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (std::find(named.begin(), named.end(), i.name) == named.end()) named.push_back(i.name);
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf) == nullptr) continue;
    i.ipv4 = buf;
    out.push_back(std::move(i));
  }
  // Interfaces without IPv4 (only AF_PACKET/AF_INET6 entries) once each, with their flags.
  for (ifaddrs* a = raw; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    const std::string name = a->ifa_name;
    const bool listed =
        std::any_of(out.begin(), out.end(), [&](const NetInterface& i) { return i.name == name; });
    if (listed) continue;
    NetInterface i;
    i.name = name;
    i.up = (a->ifa_flags & IFF_UP) != 0;
    i.running = (a->ifa_flags & IFF_RUNNING) != 0;
    i.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(i));
  }
  // Kernel order by interface, so the preference order is stable across calls.
  std::stable_sort(out.begin(), out.end(), [&](const NetInterface& x, const NetInterface& y) {
    return std::find(named.begin(), named.end(), x.name) <
           std::find(named.begin(), named.end(), y.name);
  });
  return out;
}

std::string DescribeInterfaces(const std::vector<NetInterface>& interfaces) {
  std::string s;
  for (const NetInterface& i : interfaces) {
    s += (s.empty() ? "" : ", ") + i.name + (i.ipv4.empty() ? " (no IPv4)" : " " + i.ipv4);
    if (!i.up) {
      s += " (down)";
    } else if (!i.running) {
      s += " (no carrier)";
    }
  }
  return s.empty() ? "none" : s;
}

StatusOr<std::vector<CandidateAddress>> SelectCandidates(
    const std::vector<NetInterface>& interfaces, const std::string& only) {
  std::vector<CandidateAddress> out, loopback;
  if (!only.empty()) {
    bool exists = false, usable = false;
    for (const NetInterface& i : interfaces) {
      if (i.name != only) continue;
      exists = true;
      if (i.ipv4.empty()) continue;
      usable = usable || (i.up && i.running);
      if (i.up && i.running) out.push_back({i.name, i.ipv4});
    }
    if (!exists) {
      return InvalidArgument(
          "KOROVOD_IFACE=" + only +
          ": no such interface here; the interfaces are: " + DescribeInterfaces(interfaces));
    }
    if (!usable) {
      return InvalidArgument("KOROVOD_IFACE=" + only +
                             " is not usable (down, no carrier or no IPv4 address); the "
                             "interfaces are: " +
                             DescribeInterfaces(interfaces));
    }
    return out;
  }
  for (const NetInterface& i : interfaces) {
    if (i.ipv4.empty() || !i.up || !i.running) continue;
    (i.loopback ? loopback : out).push_back({i.name, i.ipv4});
  }
  out.insert(out.end(), loopback.begin(), loopback.end());
  if (out.empty()) {
    return Unavailable("no interface is up with an IPv4 address; the interfaces are: " +
                       DescribeInterfaces(interfaces));
  }
  return out;
}

std::string InterfaceOf(const std::vector<NetInterface>& interfaces, const std::string& ip) {
  for (const NetInterface& i : interfaces) {
    if (!ip.empty() && i.ipv4 == ip) return i.name;
  }
  return "";
}

}  // namespace korovod
