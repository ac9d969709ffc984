// Conversions between korovod::Status and grpc::Status at the edge of the sidecar service.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace korovod::sidecar {

// Maps the code (kInvalidArgument -> INVALID_ARGUMENT, ...) and keeps the message.
grpc::Status ToGrpcStatus(const Status& status);
// The reverse; gRPC codes without a korovod equivalent become kUnavailable (transport failures:
// UNAVAILABLE, CANCELLED, RESOURCE_EXHAUSTED) or kInternal (the rest), the message prefixed with
// the gRPC code name so nothing is lost.
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace korovod::sidecar
