#include "launcher/output_pump.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace korovod::launcher {

StatusOr<OutputPump::StreamId> OutputPump::Add(Fd fd, LineSplitter::Sink sink) {
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "fcntl O_NONBLOCK", errno);
  }
  streams_.push_back({std::move(fd), std::make_unique<LineSplitter>(std::move(sink))});
  return streams_.size() - 1;
}

void OutputPump::AddPollFds(std::vector<pollfd>* fds) const {
  for (const Stream& s : streams_) {
    if (s.fd.valid()) fds->push_back({s.fd.get(), POLLIN, 0});
  }
}

void OutputPump::HandlePoll(const std::vector<pollfd>& fds) {
  for (const pollfd& p : fds) {
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    for (Stream& s : streams_) {
      if (s.fd.valid() && s.fd.get() == p.fd) {
        ReadOnce(s);
        break;
      }
    }
  }
}

bool OutputPump::ReadOnce(Stream& s) {
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
    if (n > 0) {
      s.splitter->Append(std::string_view(buf, static_cast<size_t>(n)));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    Close(s);  // end of file or a read error
    return false;
  }
}

void OutputPump::Close(Stream& s) {
  s.splitter->Flush();
  s.fd.Reset();
}

void OutputPump::Drain(StreamId id) {
  if (id >= streams_.size()) return;
  Stream& s = streams_[id];
  while (s.fd.valid() && ReadOnce(s)) {
  }
}

void OutputPump::FinishAll() {
  for (Stream& s : streams_) {
    while (s.fd.valid() && ReadOnce(s)) {
    }
    if (s.fd.valid()) Close(s);
  }
}

}  // namespace korovod::launcher
