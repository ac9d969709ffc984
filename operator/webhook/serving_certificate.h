// ServingCertificate: the webhook's TLS certificate chain and key, read from a directory that a
// Kubernetes Secret volume (kubernetes.io/tls: tls.crt, tls.key) or cert-manager fills, and
// re-read when the files change, so a rotated certificate is served without a restart.
//
// The kubelet rotates a Secret volume by swapping a symlink, so both files change at once; other
// writers may not. A pair that does not parse, or whose key does not match its certificate, is
// reported and the previous pair keeps serving until a good one appears.
#pragma once

#include <openssl/ssl.h>
#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace korovod::k8s_operator {

class ServingCertificate {
 public:
  using Log = std::function<void(const std::string&)>;

  // Fails (naming the path and OpenSSL's reason) unless dir/tls.crt and dir/tls.key hold a
  // matching pair.
  static StatusOr<std::unique_ptr<ServingCertificate>> Load(std::string dir, Log log = nullptr);

  // Re-reads the files if they changed since the last look. Returns true when a new pair was
  // taken. A bad new pair is logged once and the old pair is kept.
  bool Refresh();

  // SHA-256 of the served leaf certificate, hex (for logs and tests).
  std::string Fingerprint() const;

  // For SSL_CTX_set_cert_cb(ctx, &ServingCertificate::OnHandshake, this): refreshes, then puts
  // the current pair on the connection being accepted. Returns 1, or 0 to fail the handshake.
  static int OnHandshake(SSL* ssl, void* self);

  struct Pair;
  // Use Load.
  ServingCertificate(std::string dir, Log log) : dir_(std::move(dir)), log_(std::move(log)) {}
  ~ServingCertificate();

 private:
  struct Stamp {
    bool operator==(const Stamp&) const = default;
    dev_t dev[2]{};
    ino_t ino[2]{};
    off_t size[2]{};
    int64_t mtime_ns[2]{};
  };
  bool ReadStamp(Stamp* out) const;

  const std::string dir_;
  const Log log_;
  mutable std::mutex mu_;  // guards everything below
  std::shared_ptr<const Pair> current_;
  Stamp seen_;  // the files as last read, good or bad
};

}  // namespace korovod::k8s_operator
