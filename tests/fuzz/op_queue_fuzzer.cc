// The queue state a hostile peer controls: the indices and flags of a QueueControl in shared
// memory, rewritten between this side's pushes and pops. The ring may refuse (corrupt, closed,
// full, empty) but never touch memory outside its slots: the slots are an exact-size heap buffer
// under ASan. Each input byte is one step.
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "sidecar/arena/op_queue.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;
using namespace korovod::sidecar;

namespace {

constexpr size_t kRecordBytes = 64;

uint32_t Take32(const uint8_t*& p, const uint8_t* end) {
  uint32_t v = 0;
  const size_t n = std::min<size_t>(4, static_cast<size_t>(end - p));
  std::memcpy(&v, p, n);
  p += n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  const uint32_t capacity = 1u << (*p++ % 7);  // 1 .. 64 slots
  auto control = std::make_unique<QueueControl>();
  // The peer's initial state: any indices at all.
  control->head.value.store(Take32(p, end));
  control->tail.value.store(Take32(p, end));
  std::vector<std::byte> slots(capacity * kRecordBytes);
  WaitPolicy wait;
  RecordRing producer(control.get(), slots.data(), capacity, kRecordBytes, "fuzz producer", wait);
  RecordRing consumer(control.get(), slots.data(), capacity, kRecordBytes, "fuzz consumer", wait);
  std::byte record[kRecordBytes] = {};
  while (p < end) {
    switch (*p++ % 8) {
      case 0:  // the peer rewrites head
        control->head.value.store(Take32(p, end));
        break;
      case 1:  // the peer rewrites tail
        control->tail.value.store(Take32(p, end));
        break;
      case 2:
        control->closed.value.store(Take32(p, end) & 1);
        break;
      case 3:
      case 4:
        (void)producer.TryPush(record);
        break;
      case 5:
      case 6:
        if (consumer.TryPop(record)) FUZZ_CHECK(consumer.status().ok() || consumer.closed());
        break;
      default:
        (void)producer.status();
        (void)consumer.status();
        break;
    }
  }
  return 0;
}
