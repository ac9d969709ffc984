// Handshake: the mutual HMAC-SHA256 challenge on the job key that every korovod TCP connection
// runs before it carries anything (mesh streams, preflight probes, rendezvous registrations).
//
// The dialer opens with a Hello (who it is, whom it wants, what the connection is for, a nonce);
// the acceptor answers with its own nonce and its proof of the key; the dialer checks that proof
// and sends its own; the acceptor answers with a one-byte verdict. Neither side sends a proof
// before it has the other's nonce, so a recorded exchange cannot be replayed.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/status.h"

namespace korovod {

// What a connection is for, carried in the Hello's stream field: >= 0 is a mesh stream.
inline constexpr int32_t kProbeStream = -1;       // preflight reachability probe (closed after)
inline constexpr int32_t kRendezvousStream = -2;  // registration with the rendezvous coordinator

// The Hello's version: 2 the epoch in Hello and Challenge; 3 the acceptor's epoch inside its
// proof; 4 the mode agreement and authenticated frames on the control connection (wire security).
inline constexpr uint32_t kHandshakeProtocolVersion = 4;

// The dialer's opening message (wire layout, fixed size).
struct Hello {
  char magic[4];
  uint32_t version;
  int32_t from;    // the dialer's rank
  int32_t to;      // the rank it means to reach
  int32_t stream;  // mesh stream index, kProbeStream or kRendezvousStream
  int32_t world;   // world size as the dialer knows it
  uint32_t epoch;  // the membership epoch the dialer belongs to (elastic: a new one per resize)
  uint32_t reserved;
  unsigned char nonce[32];
};

// What a completed handshake leaves both ends holding, for the wire-security record layer
// (wire_security.h): HKDF-SHA256 with the job key as input key material, the dialer's and the
// acceptor's nonces as salt, and the Hello and the acceptor's epoch in the info. Both nonces are
// fresh per connection, so every connection gets its own secret; without the key it cannot be
// computed from what crossed the wire.
struct ConnectionSecret {
  std::array<unsigned char, 32> bytes{};
};

// Dialer side: sends the Hello and completes the challenge within `deadline`. PermissionDenied
// naming `who` when the job keys differ (whichever side noticed) or when `who` belongs to another
// membership epoch (the message names both: a rank of an old epoch can never join a new one);
// other failures are the socket's.
// `secret`, if set, receives the connection's secret once the acceptor accepted.
Status DialHandshake(int fd, const std::string& key, int from, int to, int stream, int world,
                     uint32_t epoch, Deadline deadline, const std::string& who,
                     ConnectionSecret* secret = nullptr);

// Acceptor side, first half: reads the Hello. InvalidArgument (with a text fit for "rejected
// ...") when it is not a korovod Hello of this protocol version; the socket's error otherwise.
StatusOr<Hello> ReadHello(int fd, Deadline deadline);

enum class AcceptOutcome {
  kAuthenticated,  // the dialer proved the key; the verdict "ok" was sent
  kWrongKey,       // the dialer's proof was wrong; the verdict "refused" was sent
  kHungUp,         // the dialer closed after seeing our proof: it holds another key (or gave up)
  kFailed,         // timeout or socket error before the dialer's proof arrived
  kOtherEpoch,     // the dialer belongs to another epoch than `epoch`: told so, nothing proved
};

// Acceptor side, second half: answers a Hello the caller accepted, as a member of `epoch`.
// `secret`, if set, receives the connection's secret when the outcome is kAuthenticated.
AcceptOutcome AnswerHello(int fd, const std::string& key, const Hello& hello, uint32_t epoch,
                          Deadline deadline, const std::string& who,
                          ConnectionSecret* secret = nullptr);

}  // namespace korovod
