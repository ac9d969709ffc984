// Rendezvous frames as a connection sends them after the handshake ([type][u32 length][text]):
// ReadFrame over a socketpair fed with any bytes, frame after frame, as the coordinator and the
// elastic server read them. Refused frames are InvalidArgument; a frame never exceeds its max.
#include "runtime/world/rendezvous_frame.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t max = 1u << (data[0] % 17);  // 1 B .. 64 KiB
  fuzz::FedSocket s = fuzz::Feed(data + 1, size - 1);
  const Deadline deadline = Deadline::After(std::chrono::milliseconds(2000));
  for (int i = 0; i < 64; ++i) {
    FrameType type{};
    auto text = ReadFrame(s.reader.get(), "RTEQV", max, deadline, "fuzz peer", &type);
    if (!text.ok()) break;
    FUZZ_CHECK(text->size() <= max);
  }
  return 0;
}
