#include "runtime/transport/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstring>

#include "runtime/transport/socket.h"

namespace korovod {
namespace {

constexpr char kHelloMagic[4] = {'K', 'V', 'R', 'D'};
constexpr uint32_t kProtocolVersion = kHandshakeProtocolVersion;

using Digest = std::array<unsigned char, 32>;

// The acceptor's answer. `epoch` is the acceptor's and inside its proof: when it differs from the
// Hello's, the acceptor closes after answering, and the dialer believes the epoch only once the
// proof checks (so no one without the key can tell a rank it belongs to another epoch).
struct Challenge {
  uint32_t epoch;
  unsigned char nonce[32];
  Digest proof;
};

// The role is part of the MAC, so an acceptor's proof can never be replayed as a dialer's.
Digest Proof(const std::string& key, const char* role, const Hello& hello,
             const unsigned char* nonce, uint32_t epoch) {
  unsigned char msg[16 + sizeof(Hello) + 32 + 4] = {};
  std::strncpy(reinterpret_cast<char*>(msg), role, 16);
  std::memcpy(msg + 16, &hello, sizeof hello);
  std::memcpy(msg + 16 + sizeof hello, nonce, 32);
  std::memcpy(msg + 16 + sizeof hello + 32, &epoch, 4);
  Digest out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg, sizeof msg, out.data(), &len);
  return out;
}

bool SameDigest(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// RFC 5869 HKDF-SHA256 (extract, then one block of expand: 32 bytes). The info binds the secret
// to this connection's Hello (ranks, stream, epoch) and the acceptor's epoch.
ConnectionSecret DeriveSecret(const std::string& key, const Hello& hello,
                              const unsigned char* acceptor_nonce, uint32_t epoch) {
  unsigned char salt[64];
  std::memcpy(salt, hello.nonce, 32);
  std::memcpy(salt + 32, acceptor_nonce, 32);
  Digest prk{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), salt, sizeof salt, reinterpret_cast<const unsigned char*>(key.data()),
       key.size(), prk.data(), &len);
  constexpr char kLabel[] = "korovod connection secret v1";
  unsigned char info[sizeof kLabel - 1 + sizeof(Hello) + 4 + 1];
  std::memcpy(info, kLabel, sizeof kLabel - 1);
  std::memcpy(info + sizeof kLabel - 1, &hello, sizeof hello);
  std::memcpy(info + sizeof kLabel - 1 + sizeof hello, &epoch, 4);
  info[sizeof info - 1] = 1;  // T(1) = HMAC(PRK, info | 0x01)
  ConnectionSecret out;
  HMAC(EVP_sha256(), prk.data(), static_cast<int>(prk.size()), info, sizeof info,
       out.bytes.data(), &len);
  OPENSSL_cleanse(prk.data(), prk.size());
  return out;
}

Status RandomNonce(unsigned char* out) {
  if (RAND_bytes(out, 32) != 1) return Internal("RAND_bytes failed");
  return OkStatus();
}

}  // namespace

Status DialHandshake(int fd, const std::string& key, int from, int to, int stream, int world,
                     uint32_t epoch, Deadline deadline, const std::string& who,
                     ConnectionSecret* secret) {
  Hello hello{};
  std::memcpy(hello.magic, kHelloMagic, 4);
  hello.version = kProtocolVersion;
  hello.from = from;
  hello.to = to;
  hello.stream = stream;
  hello.world = world;
  hello.epoch = epoch;
  KV_RETURN_IF_ERROR(RandomNonce(hello.nonce));
  Challenge ch{};
  KV_RETURN_IF_ERROR(WriteFull(fd, &hello, sizeof hello, deadline, who));
  KV_RETURN_IF_ERROR(ReadFull(fd, &ch, sizeof ch, deadline, who));
  if (!SameDigest(ch.proof, Proof(key, "acceptor", hello, ch.nonce, ch.epoch))) {
    // Hanging up without a proof tells the acceptor the keys differ.
    return PermissionDenied(who + " failed to prove the job key (wrong job key)");
  }
  if (ch.epoch != epoch) {
    return PermissionDenied(who + " belongs to membership epoch " + std::to_string(ch.epoch) +
                            ", this rank to epoch " + std::to_string(epoch) +
                            ": refused (members of different epochs never connect)");
  }
  const Digest mine = Proof(key, "connector", hello, ch.nonce, epoch);
  char verdict = 0;
  Status s = WriteFull(fd, mine.data(), mine.size(), deadline, who);
  if (s.ok()) s = ReadFull(fd, &verdict, 1, deadline, who);
  if (!s.ok() || verdict != 1) {
    return PermissionDenied(who + " rejected this rank's job key (wrong job key)");
  }
  if (secret != nullptr) *secret = DeriveSecret(key, hello, ch.nonce, ch.epoch);
  return OkStatus();
}

StatusOr<Hello> ReadHello(int fd, Deadline deadline) {
  Hello hello{};
  KV_RETURN_IF_ERROR(ReadFull(fd, &hello, sizeof hello, deadline, "a connecting peer"));
  if (std::memcmp(hello.magic, kHelloMagic, 4) != 0) {
    return InvalidArgument("a connection that is not a korovod peer");
  }
  if (hello.version != kProtocolVersion) {
    return InvalidArgument("rank " + std::to_string(hello.from) + " speaks protocol version " +
                           std::to_string(hello.version) + ", this rank " +
                           std::to_string(kProtocolVersion));
  }
  return hello;
}

AcceptOutcome AnswerHello(int fd, const std::string& key, const Hello& hello, uint32_t epoch,
                          Deadline deadline, const std::string& who,
                          ConnectionSecret* secret) {
  Challenge ch{};
  ch.epoch = epoch;
  if (!RandomNonce(ch.nonce).ok()) return AcceptOutcome::kFailed;
  ch.proof = Proof(key, "acceptor", hello, ch.nonce, epoch);
  if (hello.epoch != epoch) {
    (void)WriteFull(fd, &ch, sizeof ch, deadline, who);
    return AcceptOutcome::kOtherEpoch;
  }
  Digest their{};
  if (!WriteFull(fd, &ch, sizeof ch, deadline, who).ok()) return AcceptOutcome::kFailed;
  if (Status s = ReadFull(fd, their.data(), their.size(), deadline, who); !s.ok()) {
    return s.code() == StatusCode::kDeadlineExceeded ? AcceptOutcome::kFailed
                                                     : AcceptOutcome::kHungUp;
  }
  const bool ok = SameDigest(their, Proof(key, "connector", hello, ch.nonce, epoch));
  const char verdict = ok ? 1 : 0;
  (void)WriteFull(fd, &verdict, 1, deadline, who);
  if (ok && secret != nullptr) *secret = DeriveSecret(key, hello, ch.nonce, epoch);
  return ok ? AcceptOutcome::kAuthenticated : AcceptOutcome::kWrongKey;
}

}  // namespace korovod
