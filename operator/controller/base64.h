// Standard base64 (RFC 4648, with padding), for Secret data.
#pragma once

#include <string>
#include <string_view>

namespace korovod::op {

std::string Base64Encode(std::string_view bytes);

}  // namespace korovod::op
