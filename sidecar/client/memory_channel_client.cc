#include "sidecar/client/memory_channel_client.h"

#include <cstring>

#include "common/fd_passing.h"

namespace korovod::sidecar {

MemoryChannelClient::MemoryChannelClient(std::string path, const std::string& token)
    : path_(std::move(path)) {
  if (token.size() == token_.size()) {
    std::memcpy(token_.data(), token.data(), token_.size());
    token_ok_ = true;
  }
}

Status MemoryChannelClient::Send(const std::vector<MemoryExport>& exports, std::span<const int> fds,
                                 Deadline deadline) {
  if (path_.empty() || !token_ok_) {
    return FailedPrecondition(
        "the sidecar has no memory channel (no device backend, or a sidecar older than this "
        "client): device memory without a CUDA IPC handle cannot reach it");
  }
  size_t pieces = 0;
  for (const MemoryExport& e : exports) {
    if (e.piece_bytes.empty() || e.piece_bytes.size() > kMaxMemoryFdsPerMessage) {
      return InvalidArgument("export " + std::to_string(e.export_id) + " has " +
                             std::to_string(e.piece_bytes.size()) + " pieces (1 to " +
                             std::to_string(kMaxMemoryFdsPerMessage) + ")");
    }
    pieces += e.piece_bytes.size();
  }
  if (pieces != fds.size()) {
    return InvalidArgument(std::to_string(fds.size()) + " descriptors for " +
                           std::to_string(pieces) + " pieces");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!socket_.valid()) {
    KV_ASSIGN_OR_RETURN(socket_, ConnectSeqPacket(path_));
  }
  // Whole exports per message, as many as fit.
  MemoryFdMessage m;
  m.token = token_;
  size_t first_fd = 0, in_message = 0;
  for (const MemoryExport& e : exports) {
    if (in_message + e.piece_bytes.size() > kMaxMemoryFdsPerMessage) {
      KV_RETURN_IF_ERROR(SendOne(m, fds.subspan(first_fd, in_message), deadline));
      m.exports.clear();
      first_fd += in_message;
      in_message = 0;
    }
    m.exports.push_back(e);
    in_message += e.piece_bytes.size();
  }
  return SendOne(m, fds.subspan(first_fd, in_message), deadline);
}

Status MemoryChannelClient::SendOne(const MemoryFdMessage& m, std::span<const int> fds,
                                    Deadline deadline) {
  KV_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, EncodeMemoryFdMessage(m));
  Status s = SendWithFds(socket_.get(), bytes, fds, deadline);
  MemoryFdReply reply{};
  if (s.ok()) {
    auto* p = reinterpret_cast<std::byte*>(&reply);
    auto got = ReceiveWithFds(socket_.get(), std::span<std::byte>(p, sizeof reply), 0, deadline);
    if (!got.ok()) {
      s = got.status();
    } else if (got->bytes == 0) {
      s = Unavailable("the sidecar closed the memory channel");
    } else {
      s = DecodeMemoryFdReply(std::span<const std::byte>(p, got->bytes));
    }
  }
  if (!s.ok()) {
    socket_.Reset();  // a later Send reconnects rather than read a stale reply
    return s.WithContext("memory channel " + path_);
  }
  return OkStatus();
}

}  // namespace korovod::sidecar
