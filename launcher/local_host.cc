#include "launcher/local_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace korovod::launcher {
namespace {

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() && ::strcasecmp(a.c_str(), b.c_str()) == 0;
}

bool EndsWithIgnoreCase(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         ::strcasecmp(s.c_str() + (s.size() - suffix.size()), suffix.c_str()) == 0;
}

bool IsLoopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

// An address of this machine: loopback or the address of one of its interfaces.
bool IsOwnAddress(const sockaddr* sa) {
  if (IsLoopback(sa)) return true;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && SameAddress(i->ifa_addr, sa)) found = true;
  }
  ::freeifaddrs(list);
  return found;
}

// Resolves `host`; true when it yields at least one address and all of them are this machine's.
bool ResolvesToThisMachine(const std::string& host, bool numeric_only) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = numeric_only ? AI_NUMERICHOST : 0;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  bool all_local = true;
  for (addrinfo* r = res; r != nullptr; r = r->ai_next) {
    if (!IsOwnAddress(r->ai_addr)) all_local = false;
  }
  ::freeaddrinfo(res);
  return all_local;
}

}  // namespace

bool IsLocalHost(const std::string& host) {
  if (host.empty()) return false;
  if (EqualsIgnoreCase(host, "localhost") || EndsWithIgnoreCase(host, ".localhost") ||
      EqualsIgnoreCase(host, "localhost.localdomain")) {
    return true;
  }
  // Numeric addresses never go to the resolver.
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
      ::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return ResolvesToThisMachine(host, /*numeric_only=*/true);
  }
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') {
    std::string own(name);
    if (EqualsIgnoreCase(host, own)) return true;
    std::string own_short = own.substr(0, own.find('.'));
    std::string host_short = host.substr(0, host.find('.'));
    // "node1" given, "node1.example.com" is ours (or the reverse).
    if (EqualsIgnoreCase(host_short, own_short) &&
        (host.find('.') == std::string::npos || own.find('.') == std::string::npos)) {
      return true;
    }
  }
  return ResolvesToThisMachine(host, /*numeric_only=*/false);
}

}  // namespace korovod::launcher
