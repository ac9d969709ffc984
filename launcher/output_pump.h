// OutputPump: reads the children's stdout/stderr pipes (non-blocking, polled by the supervision
// loop in one thread) and hands each whole line to that stream's sink. Partial lines are emitted
// at end of file and by FlushAll.
#pragma once

#include <poll.h>

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "launcher/line_splitter.h"
#include "common/fd.h"

namespace korovod::launcher {

class OutputPump {
 public:
  using StreamId = size_t;

  // Takes the read end of a pipe; makes it non-blocking.
  StatusOr<StreamId> Add(Fd fd, LineSplitter::Sink sink);

  // Appends a POLLIN entry for every stream still open.
  void AddPollFds(std::vector<pollfd>* fds) const;
  // Reads once from every stream `fds` reports readable or hung up (fair between streams).
  void HandlePoll(const std::vector<pollfd>& fds);
  // Reads a stream until it has nothing more right now (its writer has exited: what it wrote is
  // all in the pipe), closing it at end of file.
  void Drain(StreamId id);
  // Drains every stream, emits all partial lines and closes every stream.
  void FinishAll();

 private:
  struct Stream {
    Fd fd;
    std::unique_ptr<LineSplitter> splitter;
  };
  // Reads once; false at end of file or error (the stream is then closed).
  bool ReadOnce(Stream& s);
  void Close(Stream& s);

  std::vector<Stream> streams_;
};

}  // namespace korovod::launcher
