// The memory channel's datagrams (sidecar/arena/memory_fd_message.h), as a trainer or any process
// that can reach the socket sends them: the first byte is the number of descriptors that came with
// the datagram, the rest its bytes. A message is refused or decoded into exports that keep every
// rule the sidecar relies on, and encodes back to the same bytes; a reply decodes to a status.
#include <cstring>
#include <span>

#include "sidecar/arena/memory_fd_message.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;
using namespace korovod::sidecar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t fds = data[0] % 40;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  auto m = DecodeMemoryFdMessage(bytes, fds);
  if (m.ok()) {
    FUZZ_CHECK(m->pieces() == fds && fds >= 1 && fds <= kMaxMemoryFdsPerMessage);
    for (const MemoryExport& e : m->exports) {
      FUZZ_CHECK(e.export_id != 0 && !e.piece_bytes.empty());
      for (uint64_t b : e.piece_bytes) FUZZ_CHECK(b > 0);
    }
    auto again = EncodeMemoryFdMessage(*m);
    FUZZ_CHECK(again.ok() && again->size() == bytes.size() &&
               std::memcmp(again->data(), bytes.data(), bytes.size()) == 0);
  }
  (void)DecodeMemoryFdReply(bytes);
  return 0;
}
