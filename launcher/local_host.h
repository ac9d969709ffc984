// IsLocalHost: whether a host name or address from -H means this machine.
#pragma once

#include <string>

namespace korovod::launcher {

// True for "localhost" (and names under .localhost), 127.0.0.0/8, ::1, this machine's host name
// (short or full), and names or addresses that resolve only to addresses of this machine's
// interfaces.
bool IsLocalHost(const std::string& host);

}  // namespace korovod::launcher
