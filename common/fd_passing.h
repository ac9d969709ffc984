// Datagrams with file descriptors attached (SCM_RIGHTS) on a connected unix socket, with a
// deadline. Received descriptors are owned by Fd at once, so none leaks whatever the message was.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/status.h"

namespace korovod {

// Sends `data` (one datagram on a SOCK_SEQPACKET socket) with `fds` attached (borrowed).
Status SendWithFds(int socket, std::span<const std::byte> data, std::span<const int> fds,
                   Deadline deadline);

struct ReceivedDatagram {
  size_t bytes = 0;        // 0: the peer closed the connection
  std::vector<Fd> fds;     // every descriptor that arrived
  bool truncated = false;  // the datagram or its descriptors did not fit (the excess is gone)
};
// Receives one datagram into `buffer`, accepting up to `max_fds` descriptors.
StatusOr<ReceivedDatagram> ReceiveWithFds(int socket, std::span<std::byte> buffer, size_t max_fds,
                                          Deadline deadline);

// Connects a SOCK_SEQPACKET socket to the unix socket at `path`.
StatusOr<Fd> ConnectSeqPacket(const std::string& path);

}  // namespace korovod
