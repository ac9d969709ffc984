#include "runtime/world/rendezvous_frame.h"

#include <arpa/inet.h>

#include <cstring>

#include "runtime/transport/socket.h"

namespace korovod {

Status WriteFrame(int fd, FrameType type, const std::string& text, Deadline deadline,
                  const std::string& who) {
  std::string msg(5, '\0');
  msg[0] = static_cast<char>(type);
  const uint32_t len = htonl(static_cast<uint32_t>(text.size()));
  std::memcpy(msg.data() + 1, &len, 4);
  msg += text;
  return WriteFull(fd, msg.data(), msg.size(), deadline, who);
}

StatusOr<std::string> ReadFrame(int fd, const std::string& accepted, uint32_t max,
                                Deadline deadline, const std::string& who, FrameType* type) {
  char head[5];
  KV_RETURN_IF_ERROR(ReadFull(fd, head, sizeof head, deadline, who));
  uint32_t len = 0;
  std::memcpy(&len, head + 1, 4);
  len = ntohl(len);
  if (accepted.find(head[0]) == std::string::npos || len > max) {
    return InvalidArgument(who + " sent a malformed rendezvous message");
  }
  std::string text(len, '\0');
  KV_RETURN_IF_ERROR(ReadFull(fd, text.data(), len, deadline, who));
  if (type != nullptr) *type = static_cast<FrameType>(head[0]);
  return text;
}

}  // namespace korovod
