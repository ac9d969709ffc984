#include "runtime/transport/wire_security.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>

namespace korovod {

const char* WireSecurityName(WireSecurity mode) {
  switch (mode) {
    case WireSecurity::kNone:
      return "none";
    case WireSecurity::kIntegrity:
      return "integrity";
    case WireSecurity::kEncrypt:
      return "encrypt";
  }
  return "?";
}

std::optional<WireSecurity> ParseWireSecurity(std::string_view text) {
  for (WireSecurity m : {WireSecurity::kNone, WireSecurity::kIntegrity, WireSecurity::kEncrypt}) {
    if (text == WireSecurityName(m)) return m;
  }
  return std::nullopt;
}

RecordKey::~RecordKey() {
  if (ctx_ != nullptr) EVP_CIPHER_CTX_free(ctx_);
}

Status RecordKey::Init(const std::array<unsigned char, 32>& key, bool sealing) {
  sealing_ = sealing;
  counter_ = 0;
  if (ctx_ == nullptr) ctx_ = EVP_CIPHER_CTX_new();
  if (ctx_ == nullptr) return Internal("EVP_CIPHER_CTX_new failed");
  // The key schedule is computed once here; each record only sets its IV (Start).
  const EVP_CIPHER* gcm = EVP_aes_256_gcm();
  const int ok = sealing ? EVP_EncryptInit_ex(ctx_, gcm, nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx_, gcm, nullptr, key.data(), nullptr);
  if (ok != 1) return Internal("AES-256-GCM initialisation failed");
  return OkStatus();
}

bool RecordKey::Start(unsigned char* iv) {
  if (ctx_ == nullptr || exhausted()) return false;
  std::memset(iv, 0, 12);
  const uint64_t n = counter_++;
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(n >> (56 - 8 * i));
  return (sealing_ ? EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv)
                   : EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv)) == 1;
}

// EVP takes int lengths; records are at most kRecordBytes, control frames a few KiB.
bool RecordKey::Seal(bool encrypt, const std::byte* in, size_t len, std::byte* out,
                     unsigned char* tag, const void* aad, size_t aad_len) {
  unsigned char iv[12];
  if (!Start(iv)) return false;
  int n = 0;
  auto* u_in = reinterpret_cast<const unsigned char*>(in);
  if (aad_len > 0 &&
      EVP_EncryptUpdate(ctx_, nullptr, &n, static_cast<const unsigned char*>(aad),
                        static_cast<int>(aad_len)) != 1) {
    return false;
  }
  if (len > 0) {
    unsigned char* u_out = encrypt ? reinterpret_cast<unsigned char*>(out) : nullptr;
    if (EVP_EncryptUpdate(ctx_, u_out, &n, u_in, static_cast<int>(len)) != 1) return false;
  }
  unsigned char scratch[16];
  if (EVP_EncryptFinal_ex(ctx_, scratch, &n) != 1) return false;
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) == 1;
}

bool RecordKey::Open(bool encrypt, std::byte* data, size_t len, const unsigned char* tag,
                     const void* aad, size_t aad_len) {
  unsigned char iv[12];
  if (!Start(iv)) return false;
  int n = 0;
  auto* u = reinterpret_cast<unsigned char*>(data);
  if (aad_len > 0 &&
      EVP_DecryptUpdate(ctx_, nullptr, &n, static_cast<const unsigned char*>(aad),
                        static_cast<int>(aad_len)) != 1) {
    return false;
  }
  if (len > 0 &&
      EVP_DecryptUpdate(ctx_, encrypt ? u : nullptr, &n, u, static_cast<int>(len)) != 1) {
    return false;
  }
  unsigned char expected[kTagBytes];
  std::memcpy(expected, tag, kTagBytes);
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kTagBytes, expected) != 1) return false;
  unsigned char scratch[16];
  return EVP_DecryptFinal_ex(ctx_, scratch, &n) == 1;
}

namespace {

// HKDF-Expand (RFC 5869), one 32-byte block: the secret is already a uniformly random key.
std::array<unsigned char, 32> Expand(const ConnectionSecret& secret, const char* label) {
  std::string info = std::string("korovod wire key v1 ") + label;
  info.push_back('\x01');
  std::array<unsigned char, 32> out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.bytes.data(), static_cast<int>(secret.bytes.size()),
       reinterpret_cast<const unsigned char*>(info.data()), info.size(), out.data(), &len);
  return out;
}

}  // namespace

Status InitConnectionKeys(const ConnectionSecret& secret, bool dialer, ConnectionKeys* keys) {
  std::array<unsigned char, 32> to_acceptor = Expand(secret, "dialer->acceptor");
  std::array<unsigned char, 32> to_dialer = Expand(secret, "acceptor->dialer");
  Status s = keys->send.Init(dialer ? to_acceptor : to_dialer, /*sealing=*/true);
  if (s.ok()) s = keys->recv.Init(dialer ? to_dialer : to_acceptor, /*sealing=*/false);
  OPENSSL_cleanse(to_acceptor.data(), to_acceptor.size());
  OPENSSL_cleanse(to_dialer.data(), to_dialer.size());
  return s;
}

Status AuthenticationFailed(const std::string& peer, int connection, uint64_t record) {
  return PermissionDenied(peer + ": message authentication failed on connection " +
                          std::to_string(connection) + " (record " + std::to_string(record) +
                          "): its bytes were altered, replayed or reordered on the way");
}

Status RecordsExhausted(const std::string& peer, int connection) {
  return FailedPrecondition("connection " + std::to_string(connection) + " with " + peer +
                            " has carried 2^32 records under one key; it is not used further " +
                            "(a new world, e.g. an elastic restart, has new keys)");
}

}  // namespace korovod
