// Host identity: the name a rank shows in messages, and the node it runs on. Two ranks share a
// node when they share a kernel and a network namespace: loopback reaches across exactly then.
// Host names do not tell (containers in one pod, network namespaces on one machine), so the node
// is the kernel's boot id and the network namespace's inode.
#pragma once

#include <string>

namespace korovod {

std::string LocalHostName();  // gethostname(2), "unknown" if it fails
std::string LocalNodeId();    // "<boot id>-net<inode>", or the host name where /proc is missing

}  // namespace korovod
