// Loopback listeners bound before any child starts: each sidecar inherits its own, so no port is
// ever chosen and then raced for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/fd.h"

namespace korovod::launcher {

struct Listener {
  Fd fd;  // listening TCP socket on a loopback address, close-on-exec
  uint16_t port = 0;
};

// Binds and listens on `count` sockets at 127.0.0.1 port 0.
StatusOr<std::vector<Listener>> BindLoopbackListeners(int count);

// One listener at `ipv4` (dotted quad, e.g. "127.0.0.2": every 127.x.y.z is this machine's
// loopback) port 0.
StatusOr<Listener> BindListener(const std::string& ipv4);

}  // namespace korovod::launcher
