// The Secret "<job>-key": the key the sidecars use to authenticate the ring (peers prove they
// know it before any tensor byte is accepted). Created once per job and kept across epochs; the
// key itself comes from the caller (the reconciler has no randomness).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "operator/api/types.h"

namespace korovod::k8s_operator {

// The data key inside the Secret, i.e. the file name in the mounted volume.
inline constexpr std::string_view kJobKeySecretKey = "key";

// True for exactly 64 hex digits (a 256-bit key).
bool IsValidJobKeyHex(std::string_view key_hex);

nlohmann::json BuildJobKeySecret(const HorovodJob& job, const std::string& key_hex);

}  // namespace korovod::k8s_operator
