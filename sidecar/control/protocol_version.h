// The version of the trainer-sidecar protocol (korovod/sidecar/v1/sidecar.proto together with the
// shared-memory arena layout), and the check both sides run in Hello.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace korovod::sidecar {

// Bump for any change an older peer cannot ignore (arena layout, RPC semantics, removed fields).
inline constexpr uint32_t kSidecarProtocolVersion = 1;

// OK when the versions match; otherwise FailedPrecondition naming both, e.g. "trainer client
// speaks sidecar protocol version 2, this sidecar speaks version 1; use a client and sidecar from
// the same korovod release".
Status CheckProtocolVersion(uint32_t client_version, uint32_t server_version);

}  // namespace korovod::sidecar
