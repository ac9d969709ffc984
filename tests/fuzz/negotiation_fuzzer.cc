// Negotiation messages as a peer sends them: a rank's requests (decoded by the coordinator, then
// ingested into its message table and decided) and the coordinator's responses (decoded by every
// other rank, then checked against the set). An accepted message re-encodes to the same bytes,
// and every size an executor computes from an accepted entry fits in 64 bits.
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/coordinator.h"
#include "runtime/core/negotiation_messages.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;

namespace {

void Requests(const std::byte* data, size_t size, int set_size, int set_rank) {
  auto reqs = DecodeRequests(data, size);
  if (!reqs.ok()) {
    FUZZ_CHECK(reqs.status().code() == StatusCode::kInternal);
    return;
  }
  const std::string again = EncodeRequests(*reqs);
  FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  size_t bytes = 8;
  for (const Request& r : *reqs) {
    FUZZ_CHECK(CheckRequestLimits(r).ok());
    FUZZ_CHECK(NumBytes(r.shape, DataTypeSize(r.dtype)) >= 0);
    bytes += EncodedRequestBytes(r);
  }
  FUZZ_CHECK(bytes == size);
  // The coordinator's table: this rank's requests, then the same from every other rank, so that
  // entries complete and are decided (mismatch texts, groups, joins, allgather rows).
  Coordinator coord(set_size, [](int r) { return "rank " + std::to_string(r); }, nullptr);
  for (int r = 0; r < set_size; ++r) {
    if (r == set_rank || (r + set_rank) % 3 != 0) coord.Ingest(r, *reqs, Clock::now());
  }
  ResponseList list;
  list.responses = coord.TakeReady();
  for (const Response& r : list.responses) {
    if (!r.error.empty()) continue;
    FUZZ_CHECK(NumBytes(r.shape, DataTypeSize(r.dtype)) >= 0);
  }
  // What the coordinator sends, the others accept.
  const std::string encoded = EncodeResponses(list);
  auto decoded =
      DecodeResponses(reinterpret_cast<const std::byte*>(encoded.data()), encoded.size());
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(CheckResponsesForSet(*decoded, set_size).ok());
}

void Responses(const std::byte* data, size_t size, int set_size) {
  auto list = DecodeResponses(data, size);
  if (!list.ok()) return;
  const std::string again = EncodeResponses(*list);
  FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  for (const Response& r : list->responses) {
    FUZZ_CHECK(NumBytes(r.shape, DataTypeSize(r.dtype)) >= 0);
    (void)r.ByteSize();
  }
  (void)CheckResponsesForSet(*list, set_size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int set_size = data[0] % 4 + 1;
  const int set_rank = (data[0] >> 2) % set_size;
  const bool responses = (data[0] & 0x80) != 0;
  const auto* bytes = reinterpret_cast<const std::byte*>(data + 1);
  if (responses) {
    Responses(bytes, size - 1, set_size);
  } else {
    Requests(bytes, size - 1, set_size, set_rank);
  }
  return 0;
}
