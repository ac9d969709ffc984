// TCP socket primitives with deadlines: an owning fd, listen, connect with retry, full reads and
// writes for handshakes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/status.h"
#include "runtime/transport/transport_options.h"

namespace korovod {

StatusOr<Fd> ListenTcp(const std::string& host, uint16_t port, int backlog);
// Dials `addr`, retrying refused/unreachable attempts with backoff until the deadline. The name
// is resolved once: one that does not resolve yet fails at once (ConnectTcpAny waits for it).
StatusOr<Fd> ConnectTcp(const PeerAddress& addr, Deadline deadline);
// Dials every address `addr.host` resolves to (resolved again each round), the first that accepts
// wins: a name behind which one of several pods listens (the operator's leader among its
// replicas), until the deadline.
// `avoid` ("ip:port" of addresses that answered wrongly, e.g. a deposed leader's membership
// server) are dialed only after every other address failed in a round.
StatusOr<Fd> ConnectTcpAny(const PeerAddress& addr, Deadline deadline,
                           const std::set<std::string>& avoid = {});
// Accepts one connection or times out.
StatusOr<Fd> AcceptTcp(int listen_fd, Deadline deadline);

Status SetNonBlocking(int fd, bool on);
Status SetNoDelay(int fd);

// Blocking-style helpers over a (possibly non-blocking) socket, bounded by the deadline.
// `who` names the peer in errors.
Status WriteFull(int fd, const void* data, size_t len, Deadline deadline, const std::string& who);
Status ReadFull(int fd, void* data, size_t len, Deadline deadline, const std::string& who);

// Local port of a bound socket (for tests that listen on port 0).
StatusOr<uint16_t> LocalPort(int fd);

// Numeric IP of a connected socket's local (or remote) end, e.g. "10.0.0.2"; "" if unknown.
std::string SocketIp(int fd, bool local);

}  // namespace korovod
