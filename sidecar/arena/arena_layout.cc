#include "sidecar/arena/arena_layout.h"

#include <algorithm>
#include <string>

namespace korovod::sidecar {
namespace {

uint64_t RoundUpToPage(uint64_t v) {
  return (v + kArenaPageBytes - 1) / kArenaPageBytes * kArenaPageBytes;
}

bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

Status CheckSlots(const char* what, uint32_t slots) {
  if (slots < kMinQueueSlots || slots > kMaxQueueSlots || !IsPowerOfTwo(slots)) {
    return InvalidArgument(std::string("arena ") + what + " is " + std::to_string(slots) +
                           ": must be a power of two in [" + std::to_string(kMinQueueSlots) + ", " +
                           std::to_string(kMaxQueueSlots) + "]");
  }
  return OkStatus();
}

Status CheckHeap(const char* what, uint64_t bytes) {
  if (bytes == 0 || bytes > kMaxHeapBytes) {
    return InvalidArgument(std::string("arena ") + what + " is " + std::to_string(bytes) +
                           ": must be in [1, " + std::to_string(kMaxHeapBytes) + "]");
  }
  return OkStatus();
}

}  // namespace

const char* RecordOpTypeName(RecordOpType t) {
  switch (t) {
    case RecordOpType::kAllreduce:
      return "allreduce";
    case RecordOpType::kAllgather:
      return "allgather";
    case RecordOpType::kBroadcast:
      return "broadcast";
    case RecordOpType::kAlltoall:
      return "alltoall";
    case RecordOpType::kReduceScatter:
      return "reducescatter";
    case RecordOpType::kBarrier:
      return "barrier";
    case RecordOpType::kJoin:
      return "join";
  }
  return "unknown";
}

Status SetName(SubmissionRecord& r, std::string_view name) {
  if (name.size() > kMaxNameBytes) {
    return InvalidArgument("tensor name of " + std::to_string(name.size()) +
                           " bytes is longer than the " + std::to_string(kMaxNameBytes) +
                           "-byte limit: " + std::string(name.substr(0, 40)) + "...");
  }
  if (name.find('\0') != std::string_view::npos) {
    return InvalidArgument("tensor name contains a NUL byte");
  }
  std::memset(r.name, 0, sizeof(r.name));
  std::memcpy(r.name, name.data(), name.size());
  r.name_len = static_cast<uint16_t>(name.size());
  return OkStatus();
}

std::string_view NameOf(const SubmissionRecord& r) {
  return std::string_view(r.name, std::min<size_t>(r.name_len, kMaxNameBytes));
}

void SetStatus(CompletionRecord& r, const Status& s) {
  r.status = static_cast<uint8_t>(s.code());
  const std::string& m = s.message();
  const size_t n = std::min(m.size(), kMaxMessageBytes);
  std::memset(r.message, 0, sizeof(r.message));
  std::memcpy(r.message, m.data(), n);
  r.message_len = static_cast<uint16_t>(n);
  if (n < m.size()) {
    r.flags |= kCompleteMessageTruncated;
  } else {
    r.flags &= static_cast<uint8_t>(~kCompleteMessageTruncated);
  }
}

Status StatusOf(const CompletionRecord& r) {
  if (r.status == 0) return OkStatus();
  const StatusCode code =
      r.status < kRecordStatusCodeCount ? static_cast<StatusCode>(r.status) : StatusCode::kInternal;
  std::string message(r.message, std::min<size_t>(r.message_len, kMaxMessageBytes));
  if ((r.flags & kCompleteMessageTruncated) != 0) message += " [truncated]";
  if (r.status >= kRecordStatusCodeCount) {
    message = "unknown status code " + std::to_string(r.status) + ": " + message;
  }
  return Status(code, std::move(message));
}

StatusOr<ArenaLayout> ComputeArenaLayout(const ArenaSizes& sizes) {
  KV_RETURN_IF_ERROR(CheckSlots("submission_slots", sizes.submission_slots));
  KV_RETURN_IF_ERROR(CheckSlots("completion_slots", sizes.completion_slots));
  KV_RETURN_IF_ERROR(CheckHeap("client_heap_bytes", sizes.client_heap_bytes));
  KV_RETURN_IF_ERROR(CheckHeap("result_heap_bytes", sizes.result_heap_bytes));
  // Every term is bounded (slots <= 2^16 records of ~1 KiB, heaps <= 2^40), so no overflow.
  ArenaLayout l;
  l.submission_slots = sizes.submission_slots;
  l.completion_slots = sizes.completion_slots;
  uint64_t at = kArenaPageBytes;
  auto place = [&at](uint64_t bytes) {
    Region r{at, RoundUpToPage(bytes)};
    at += r.bytes;
    return r;
  };
  l.submission_queue = place(uint64_t{sizes.submission_slots} * sizeof(SubmissionRecord));
  l.completion_queue = place(uint64_t{sizes.completion_slots} * sizeof(CompletionRecord));
  l.client_heap = place(sizes.client_heap_bytes);
  l.result_heap = place(sizes.result_heap_bytes);
  l.total_bytes = at;
  return l;
}

}  // namespace korovod::sidecar
