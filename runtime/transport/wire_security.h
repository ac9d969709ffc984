// Wire security: the record layer that authenticates (and in encrypt mode encrypts) the bytes of
// a mesh connection once its handshake is done (KOROVOD_WIRE_SECURITY, docs/security.md).
//
// Every connection has two keys, one per direction, expanded from the handshake's per-connection
// secret (handshake.h) with HKDF-SHA256 and the direction in the label. A direction's bytes are a
// sequence of records; each record is its payload followed by a 16-byte AES-256-GCM tag:
//   integrity: the payload travels as is and is the GCM additional data (GMAC);
//   encrypt:   the payload is the GCM ciphertext.
// Records carry no header: both ends cut a message into records the same way (the transport's
// parts, then kRecordBytes each), and the nonce is the record's number in its direction (4 zero
// bytes, then the 64-bit counter), never sent and never reused. A record altered, dropped,
// replayed or reordered fails the tag. A direction carries at most kMaxRecords records (2^32);
// the next fails: a new mesh (a new epoch) has new keys.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/transport_options.h"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace korovod {

const char* WireSecurityName(WireSecurity mode);  // "none", "integrity", "encrypt"
std::optional<WireSecurity> ParseWireSecurity(std::string_view text);

// One direction of one connection: a key and the number of the next record.
class RecordKey {
 public:
  static constexpr size_t kTagBytes = 16;
  // Bytes of payload per record: the transport's receive granule, so a consumed record is handed
  // on from the window it was verified in.
  static constexpr size_t kRecordBytes = 256 << 10;
  static constexpr uint64_t kMaxRecords = uint64_t{1} << 32;

  RecordKey() = default;
  ~RecordKey();
  RecordKey(const RecordKey&) = delete;
  RecordKey& operator=(const RecordKey&) = delete;

  Status Init(const std::array<unsigned char, 32>& key, bool sealing);

  // The next record's tag over `aad` and `in`; encrypt: also its ciphertext at `out` (may be
  // `in`); integrity: `out` is unused and `in` the additional data. False at kMaxRecords records
  // (exhausted()) or on an OpenSSL failure.
  bool Seal(bool encrypt, const std::byte* in, size_t len, std::byte* out, unsigned char* tag,
            const void* aad = nullptr, size_t aad_len = 0);
  // Checks the next record in place (encrypt: decrypts it there). False when the tag does not
  // match (altered, replayed, reordered, another key) or at kMaxRecords records.
  bool Open(bool encrypt, std::byte* data, size_t len, const unsigned char* tag,
            const void* aad = nullptr, size_t aad_len = 0);

  uint64_t records() const { return counter_; }
  bool exhausted() const { return counter_ >= kMaxRecords; }

 private:
  bool Start(unsigned char* iv);
  EVP_CIPHER_CTX* ctx_ = nullptr;
  bool sealing_ = true;
  uint64_t counter_ = 0;
};

// Both directions of one connection.
struct ConnectionKeys {
  RecordKey send;
  RecordKey recv;
};

// Expands the two direction keys of a connection from its handshake secret; `dialer` says which
// end this is (the dialer's sending key is the acceptor's receiving key).
Status InitConnectionKeys(const ConnectionSecret& secret, bool dialer, ConnectionKeys* keys);

// The error of a record that failed its tag on `connection` (1-based, as the mesh counts them)
// from `peer` ("rank 1 (10.0.0.2:5000)").
Status AuthenticationFailed(const std::string& peer, int connection, uint64_t record);
// A direction that has carried kMaxRecords records.
Status RecordsExhausted(const std::string& peer, int connection);

}  // namespace korovod
