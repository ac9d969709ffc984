#include "sidecar/control/protocol_version.h"

#include <string>

namespace korovod::sidecar {

Status CheckProtocolVersion(uint32_t client_version, uint32_t server_version) {
  if (client_version == server_version) return OkStatus();
  return FailedPrecondition("trainer client speaks sidecar protocol version " +
                            std::to_string(client_version) + ", this sidecar speaks version " +
                            std::to_string(server_version) +
                            "; use a client and sidecar from the same korovod release");
}

}  // namespace korovod::sidecar
