// Rendezvous frames: after the job-key handshake, rendezvous connections (the static coordinator's
// and the elastic membership server's) carry text frames: [type][u32 length, network order][text].
#pragma once

#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/status.h"

namespace korovod {

enum class FrameType : char {
  kRegistration = 'R',  // a rank's (or elastic worker's) registration
  kTable = 'T',         // the world table (elastic: with the epoch and the rank assigned)
  kRefusal = 'E',       // elastic: why the server will not place this worker
  kQuery = 'Q',         // elastic: "what is the membership version?"
  kVersion = 'V',       // elastic: the answer
  kFenced = 'F',        // elastic: "my fencing token is below yours" (a deposed leader's server)
};

Status WriteFrame(int fd, FrameType type, const std::string& text, Deadline deadline,
                  const std::string& who);

// Reads one frame whose type is one of `accepted` (a string of FrameType chars) and whose text is
// at most `max` bytes; `type` (optional) receives which. InvalidArgument names `who` otherwise.
StatusOr<std::string> ReadFrame(int fd, const std::string& accepted, uint32_t max,
                                Deadline deadline, const std::string& who,
                                FrameType* type = nullptr);

}  // namespace korovod
