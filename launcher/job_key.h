// The job key: 32 random bytes (getrandom), written as 64 lowercase hex digits and a newline to a
// file of mode 0600. Sidecars prove knowledge of it to each other before accepting tensor bytes.
#pragma once

#include <string>

#include "common/status.h"

namespace korovod::launcher {

// 64 lowercase hex digits from 32 bytes of getrandom(2).
StatusOr<std::string> RandomHex(size_t bytes);

// Creates `path` (must not exist) with mode 0600 holding `hex_key` + "\n".
Status WriteJobKeyFile(const std::string& path, const std::string& hex_key);

}  // namespace korovod::launcher
