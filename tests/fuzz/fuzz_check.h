// Helpers shared by the fuzz targets: an invariant check that crashes (so libFuzzer keeps the
// input), and a socketpair fed with the fuzzer's bytes for decoders that read a socket.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "common/fd.h"

// An invariant the decoder promises; a violation is a finding, so abort (libFuzzer saves it).
#define FUZZ_CHECK(cond)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s)\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

namespace korovod::fuzz {

// A connected pair: the decoder reads `reader`; `data` was written into the other end, which is
// then shut for writing, so the reader sees the bytes and then EOF (never a wait). The write does
// not block: what does not fit the socket buffer is dropped (a truncated stream).
struct FedSocket {
  korovod::Fd reader;
  korovod::Fd writer;
};

inline FedSocket Feed(const uint8_t* data, size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  FedSocket s{korovod::Fd(sv[0]), korovod::Fd(sv[1])};
  ::fcntl(sv[1], F_SETFL, O_NONBLOCK);
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::write(sv[1], data + off, size - off);
    if (n <= 0) break;  // buffer full: the reader sees a truncated stream, which is fine too
    off += static_cast<size_t>(n);
  }
  ::shutdown(sv[1], SHUT_WR);
  return s;
}

}  // namespace korovod::fuzz
