#include "sidecar/arena/memory_fd_message.h"

#include <algorithm>
#include <cstring>

namespace korovod::sidecar {
namespace {

Status Bad(const std::string& what) { return InvalidArgument("memory channel message: " + what); }

}  // namespace

size_t MemoryFdMessage::pieces() const {
  size_t n = 0;
  for (const MemoryExport& e : exports) n += e.piece_bytes.size();
  return n;
}

StatusOr<MemoryFdMessage> DecodeMemoryFdMessage(std::span<const std::byte> bytes, size_t fds) {
  MemoryFdHeader h;
  if (bytes.size() < sizeof h) {
    return Bad(std::to_string(bytes.size()) + " bytes, shorter than its header");
  }
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != kMemoryFdMagic) return Bad("bad magic");
  if (h.version != kMemoryFdVersion) {
    return Bad("version " + std::to_string(h.version) + ", this sidecar speaks " +
               std::to_string(kMemoryFdVersion));
  }
  if (h.count == 0 || h.count > kMaxMemoryFdsPerMessage) {
    return Bad(std::to_string(h.count) + " pieces (1 to " +
               std::to_string(kMaxMemoryFdsPerMessage) + " per message)");
  }
  if (bytes.size() != sizeof h + h.count * sizeof(MemoryFdPiece)) {
    return Bad(std::to_string(bytes.size()) + " bytes for " + std::to_string(h.count) + " pieces");
  }
  if (fds != h.count) {
    return Bad(std::to_string(h.count) + " pieces but " + std::to_string(fds) +
               " file descriptors attached");
  }
  MemoryFdMessage m;
  std::memcpy(m.token.data(), h.token, m.token.size());
  std::vector<uint32_t> expected;  // pieces of each export, as its first piece says
  for (size_t i = 0; i < h.count; ++i) {
    MemoryFdPiece p;
    std::memcpy(&p, bytes.data() + sizeof h + i * sizeof p, sizeof p);
    const std::string at = "piece " + std::to_string(i);
    if (p.export_id == 0) return Bad(at + ": export id 0");
    if (p.bytes == 0) return Bad(at + ": 0 bytes");
    if (p.pieces == 0 || p.pieces > kMaxMemoryFdsPerMessage || p.index >= p.pieces) {
      return Bad(at + ": index " + std::to_string(p.index) + " of " + std::to_string(p.pieces));
    }
    if (p.index == 0) {
      for (const MemoryExport& e : m.exports) {
        if (e.export_id == p.export_id) {
          return Bad(at + ": export id " + std::to_string(p.export_id) + " twice");
        }
      }
      if (!m.exports.empty() && m.exports.back().piece_bytes.size() != expected.back()) {
        return Bad(at + ": export " + std::to_string(m.exports.back().export_id) +
                   " ends before its last piece");
      }
      m.exports.push_back(MemoryExport{p.export_id, {}});
      expected.push_back(p.pieces);
    }
    if (m.exports.empty() || m.exports.back().export_id != p.export_id ||
        m.exports.back().piece_bytes.size() != p.index || expected.back() != p.pieces) {
      return Bad(at + ": export " + std::to_string(p.export_id) +
                 "'s pieces are not consecutive from index 0");
    }
    m.exports.back().piece_bytes.push_back(p.bytes);
  }
  if (m.exports.back().piece_bytes.size() != expected.back()) {
    return Bad("export " + std::to_string(m.exports.back().export_id) + " has " +
               std::to_string(m.exports.back().piece_bytes.size()) + " of " +
               std::to_string(expected.back()) + " pieces");
  }
  return m;
}

StatusOr<std::vector<std::byte>> EncodeMemoryFdMessage(const MemoryFdMessage& m) {
  const size_t n = m.pieces();
  if (n == 0 || n > kMaxMemoryFdsPerMessage) {
    return InvalidArgument(std::to_string(n) + " pieces in one memory channel message (1 to " +
                           std::to_string(kMaxMemoryFdsPerMessage) + ")");
  }
  std::vector<std::byte> out(sizeof(MemoryFdHeader) + n * sizeof(MemoryFdPiece));
  MemoryFdHeader h{};
  h.magic = kMemoryFdMagic;
  h.version = kMemoryFdVersion;
  h.count = static_cast<uint16_t>(n);
  std::memcpy(h.token, m.token.data(), m.token.size());
  std::memcpy(out.data(), &h, sizeof h);
  size_t at = sizeof h;
  for (const MemoryExport& e : m.exports) {
    for (size_t i = 0; i < e.piece_bytes.size(); ++i) {
      const MemoryFdPiece p{e.export_id, e.piece_bytes[i], static_cast<uint32_t>(i),
                            static_cast<uint32_t>(e.piece_bytes.size())};
      std::memcpy(out.data() + at, &p, sizeof p);
      at += sizeof p;
    }
  }
  KV_RETURN_IF_ERROR(DecodeMemoryFdMessage(out, n).status());  // one set of rules
  return out;
}

MemoryFdReply EncodeMemoryFdReply(const Status& s) {
  MemoryFdReply r{};
  r.magic = kMemoryFdReplyMagic;
  r.code = static_cast<uint32_t>(s.code());
  const std::string& msg = s.message();
  std::memcpy(r.message, msg.data(), std::min(msg.size(), sizeof r.message - 1));
  return r;
}

Status DecodeMemoryFdReply(std::span<const std::byte> bytes) {
  MemoryFdReply r;
  if (bytes.size() != sizeof r) return InvalidArgument("memory channel reply of wrong size");
  std::memcpy(&r, bytes.data(), sizeof r);
  if (r.magic != kMemoryFdReplyMagic) return InvalidArgument("memory channel reply: bad magic");
  if (r.code == 0) return OkStatus();
  if (r.code > static_cast<uint32_t>(StatusCode::kUnimplemented)) {
    return InvalidArgument("memory channel reply: unknown code " + std::to_string(r.code));
  }
  r.message[sizeof r.message - 1] = '\0';
  return Status(static_cast<StatusCode>(r.code), r.message);
}

}  // namespace korovod::sidecar
