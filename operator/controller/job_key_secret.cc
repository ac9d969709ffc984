#include "operator/controller/job_key_secret.h"

#include "common/base64.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"

namespace korovod::k8s_operator {

bool IsValidJobKeyHex(std::string_view key_hex) {
  if (key_hex.size() != 64) return false;
  for (char c : key_hex) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

nlohmann::json BuildJobKeySecret(const HorovodJob& job, const std::string& key_hex) {
  return nlohmann::json{{"apiVersion", "v1"},
                        {"kind", "Secret"},
                        {"metadata", ChildMetadata(job, JobKeySecretName(job))},
                        {"type", "Opaque"},
                        // Every sidecar of a world must hold the same key, and one the kubelet
                        // restarts reads the Secret again: a key edited under a running world
                        // would split it. Immutable, the API server refuses any update, so a new
                        // key only comes by delete and recreate (the operator never updates it).
                        {"immutable", true},
                        {"data", {{std::string(kJobKeySecretKey), Base64Encode(key_hex)}}}};
}

}  // namespace korovod::k8s_operator
