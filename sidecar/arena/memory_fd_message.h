// The memory channel: how a trainer hands the sidecar device memory that has no legacy IPC handle
// (cuMemCreate: PyTorch's expandable segments). Each piece of such an allocation is exported as a
// POSIX file descriptor and sent with SCM_RIGHTS on a SOCK_SEQPACKET unix socket beside the gRPC
// one (HelloReply.memory_socket), one datagram per message, before the first op that names the
// allocation by its export id (kDeviceHandleExported). Every message carries the session's token
// (HelloReply.memory_token) and is answered by one MemoryFdReply. The decoder trusts nothing: the
// layout, the counts, the descriptors attached and the pieces' order are all checked.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace korovod::sidecar {

inline constexpr uint32_t kMemoryFdMagic = 0x4456464bu;       // "KFVD" little-endian
inline constexpr uint32_t kMemoryFdReplyMagic = 0x5256464bu;  // "KFVR"
inline constexpr uint16_t kMemoryFdVersion = 1;
// Descriptors in one message (the kernel allows 253); an export has at most this many pieces.
inline constexpr size_t kMaxMemoryFdsPerMessage = 32;
inline constexpr size_t kMemoryTokenBytes = 16;
using MemoryToken = std::array<std::byte, kMemoryTokenBytes>;

struct MemoryFdHeader {
  uint32_t magic;    // kMemoryFdMagic
  uint16_t version;  // kMemoryFdVersion
  uint16_t count;    // MemoryFdPiece records that follow == descriptors attached, 1..32
  uint8_t token[kMemoryTokenBytes];
};
static_assert(sizeof(MemoryFdHeader) == 24);

// One piece, in the order of the attached descriptors. The pieces of one export are consecutive,
// index 0 .. pieces-1, and are mapped back to back in that order.
struct MemoryFdPiece {
  uint64_t export_id;  // > 0, chosen by the trainer, unique in its session
  uint64_t bytes;      // > 0
  uint32_t index;
  uint32_t pieces;
};
static_assert(sizeof(MemoryFdPiece) == 24);

inline constexpr size_t kMaxMemoryFdMessageBytes =
    sizeof(MemoryFdHeader) + kMaxMemoryFdsPerMessage * sizeof(MemoryFdPiece);

struct MemoryFdReply {
  uint32_t magic;     // kMemoryFdReplyMagic
  uint32_t code;      // StatusCode; 0: every export is held for the session
  char message[248];  // NUL-terminated
};
static_assert(sizeof(MemoryFdReply) == 256);

// One allocation: its export id and its pieces' sizes (the descriptors go alongside, in order).
struct MemoryExport {
  uint64_t export_id = 0;
  std::vector<uint64_t> piece_bytes;
};

struct MemoryFdMessage {
  MemoryToken token{};
  std::vector<MemoryExport> exports;
  size_t pieces() const;
};

// The message in `bytes`, which arrived with `fds` descriptors; InvalidArgument naming the first
// thing wrong.
StatusOr<MemoryFdMessage> DecodeMemoryFdMessage(std::span<const std::byte> bytes, size_t fds);
// The datagram for `m`; InvalidArgument if it breaks a rule the decoder checks.
StatusOr<std::vector<std::byte>> EncodeMemoryFdMessage(const MemoryFdMessage& m);

MemoryFdReply EncodeMemoryFdReply(const Status& s);
// The status a reply carries; InvalidArgument if `bytes` is not a reply.
Status DecodeMemoryFdReply(std::span<const std::byte> bytes);

}  // namespace korovod::sidecar
