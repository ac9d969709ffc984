// Standard base64 (RFC 4648 section 4: "+/" alphabet, "=" padding): the one codec of the project.
// Kubernetes Secret data, kubeconfig "-data" fields and AdmissionReview patches all use it.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace korovod {

std::string Base64Encode(std::string_view bytes);

// Decodes `text`, skipping ASCII whitespace (PEM-style line breaks in kubeconfigs). Padding is
// required (the length without whitespace is a multiple of 4) and "=" may appear only at the end.
// The message says what is wrong; callers prefix the field's name with WithContext.
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace korovod
