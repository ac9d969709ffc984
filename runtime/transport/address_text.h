// The text of a socket address, for the listeners' logs and the dialers' "avoid" sets.
#pragma once

#include <sys/socket.h>

#include <string>
#include <utility>

namespace korovod {

// "10.0.0.2:41234" and "10.0.0.2" of an address ("?" for a family other than IPv4 and IPv6).
std::pair<std::string, std::string> AddressText(const sockaddr_storage& ss);

}  // namespace korovod
