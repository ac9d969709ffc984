// Interfaces: this host's network interfaces and their IPv4 addresses (getifaddrs), and which of
// them a rank offers its peers as candidate addresses.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod {

struct NetInterface {
  std::string name;
  std::string ipv4;      // empty: the interface has no IPv4 address
  bool up = false;       // administratively up (IFF_UP)
  bool running = false;  // has carrier (IFF_RUNNING)
  bool loopback = false;
};

// One entry per (interface, IPv4 address), in the kernel's order; an interface without an IPv4
// address appears once with an empty one, so that errors can list it.
StatusOr<std::vector<NetInterface>> ListInterfaces();

// The addresses a rank registers, most preferred first. Without `only`: every IPv4 address of an
// interface that is up and has carrier, loopback last (the world table keeps loopback only within
// one node: ApplyLoopbackRule). With `only` (KOROVOD_IFACE): that interface's addresses alone; an
// unknown, down or address-less interface is an error listing the interfaces there are.
StatusOr<std::vector<CandidateAddress>> SelectCandidates(
    const std::vector<NetInterface>& interfaces, const std::string& only);

// The name of the interface holding `ip`, or "" when none here does.
std::string InterfaceOf(const std::vector<NetInterface>& interfaces, const std::string& ip);

// "lo 127.0.0.1, eth0 10.0.0.2 (down), eth2 (no IPv4)": for error messages.
std::string DescribeInterfaces(const std::vector<NetInterface>& interfaces);

}  // namespace korovod
