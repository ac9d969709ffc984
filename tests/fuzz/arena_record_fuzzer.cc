// The arena's records as a hostile peer writes them: a submission record (trainer -> sidecar,
// ValidateSubmission, with the client heap it may point into) and a completion record
// (sidecar -> trainer, ValidateCompletion and StatusOf), against a layout computed from fuzzed
// sizes (the header's check of a stored layout). Whatever the bytes: no crash, and every range
// an accepted record yields lies inside its heap.
#include <cstring>
#include <vector>

#include "sidecar/arena/arena_layout.h"
#include "sidecar/arena/record_validation.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;
using namespace korovod::sidecar;

namespace {

ArenaLayout LayoutFrom(const uint8_t*& data, size_t& size) {
  ArenaSizes sizes;
  sizes.reserve_memory = false;
  sizes.submission_slots = 4;
  sizes.completion_slots = 4;
  sizes.client_heap_bytes = 64 << 10;
  sizes.result_heap_bytes = 64 << 10;
  if (size >= 4) {
    // Heaps of 1 to 256 pages (kept small: the client heap is allocated below).
    uint16_t c = 0, r = 0;
    std::memcpy(&c, data, 2);
    std::memcpy(&r, data + 2, 2);
    sizes.client_heap_bytes = (uint64_t{c} % 256 + 1) * 4096 - (c >> 8) % 7;
    sizes.result_heap_bytes = (uint64_t{r} % 256 + 1) * 4096 - (r >> 8) % 7;
    data += 4;
    size -= 4;
  }
  auto layout = ComputeArenaLayout(sizes);
  FUZZ_CHECK(layout.ok());
  return *layout;
}

bool Inside(const Region& heap, const Region& r) { return heap.Contains(r.offset, r.bytes); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 3;
  ++data;
  --size;
  const ArenaLayout layout = LayoutFrom(data, size);
  if (which == 0 || which == 1) {
    SubmissionRecord rec;
    std::memset(&rec, 0, sizeof rec);
    std::memcpy(&rec, data, std::min(size, sizeof rec));
    std::vector<std::byte> heap(layout.client_heap.bytes);
    if (size > sizeof rec) {
      std::memcpy(heap.data(), data + sizeof rec, std::min(size - sizeof rec, heap.size()));
    }
    (void)NameOf(rec);
    auto op = ValidateSubmission(rec, layout, which == 0 ? std::span<const std::byte>(heap)
                                                         : std::span<const std::byte>());
    if (op.ok()) {
      FUZZ_CHECK(op->num_elements >= 0);
      FUZZ_CHECK(op->shape.size() <= static_cast<size_t>(kMaxDims));
      FUZZ_CHECK(op->name.size() <= kMaxNameBytes);
      FUZZ_CHECK(Inside(layout.client_heap, op->input));
      if (!op->output_in_result_heap) FUZZ_CHECK(Inside(layout.client_heap, op->output));
      if (op->kind == RecordKind::kReleaseResult) {
        FUZZ_CHECK(op->release_offset < layout.result_heap.bytes);
      }
      FUZZ_CHECK(op->splits.size() <= kMaxSplits);
    } else {
      FUZZ_CHECK(!op.status().message().empty());
    }
  } else {
    CompletionRecord rec;
    std::memset(&rec, 0, sizeof rec);
    std::memcpy(&rec, data, std::min(size, sizeof rec));
    const Status s = ValidateCompletion(rec, layout);
    const Status carried = StatusOf(rec);  // read even when invalid: the client reports it
    (void)carried;
    if (s.ok()) {
      const bool in_result = (rec.flags & kCompleteOutputInResultHeap) != 0;
      FUZZ_CHECK((in_result ? layout.result_heap : layout.client_heap)
                     .Contains(rec.output_offset, rec.output_bytes));
      FUZZ_CHECK(rec.ndims <= kMaxDims);
    }
  }
  return 0;
}
