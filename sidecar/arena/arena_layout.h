// The shared-memory arena between a trainer (client) and its sidecar: a versioned header page,
// then the submission queue (client → sidecar), the completion queue (sidecar → client), the
// client heap (the trainer allocates tensors there) and the result heap (the sidecar allocates
// outputs whose size is known only after negotiation). Everything here is plain data at fixed
// offsets; both processes map the same bytes, so any change to a record or to the header is a new
// kProtocolVersion.
//
// Offsets inside records are relative to the start of the heap they name (client heap unless a
// flag says result heap), so a heap allocator's offsets go into records unchanged.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "common/data_type.h"
#include "common/status.h"

namespace korovod::sidecar {

inline constexpr uint64_t kArenaMagic = 0x314e524156524b4bull;  // "KKRVARN1" little-endian
inline constexpr uint32_t kProtocolVersion = 2;                 // 2: sidecar_heartbeat
inline constexpr size_t kArenaPageBytes = 4096;  // header page; regions start on page boundaries
inline constexpr size_t kCacheLineBytes = 64;

inline constexpr int kMaxDims = 8;
inline constexpr int kMaxInlineSplits = 64;  // more splits live in the client heap
inline constexpr uint32_t kMaxSplits = 1u << 16;
inline constexpr uint32_t kMaxGroupSize = 1u << 16;
inline constexpr size_t kMaxNameBytes = 200;
inline constexpr size_t kMaxMessageBytes = 400;

inline constexpr uint32_t kMinQueueSlots = 2;
inline constexpr uint32_t kMaxQueueSlots = 1u << 16;
inline constexpr uint64_t kMaxHeapBytes = uint64_t{1} << 40;

// ---- Record enums. Values are part of the protocol: never renumber, only append. ----

enum class RecordKind : uint8_t {
  kInvalid = 0,        // a zeroed record is refused
  kOp = 1,             // a collective (join is an op type)
  kReleaseResult = 2,  // the client is done with a result-heap block: output_offset
};

// Mirrors korovod::OpType (runtime/core/op_request.h) for the ops a trainer may submit; the
// sidecar maps one to the other (add-process-set goes through the gRPC control plane).
enum class RecordOpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReduceScatter = 4,
  kBarrier = 5,
  kJoin = 6,
};
inline constexpr uint8_t kRecordOpTypeCount = 7;
const char* RecordOpTypeName(RecordOpType t);  // "allreduce", ... or "unknown"

// Mirrors korovod::ReduceOp (common/reduce_op.h).
enum class RecordReduceOp : uint8_t { kSum = 0, kAverage = 1, kMin = 2, kMax = 3, kProduct = 4 };
inline constexpr uint8_t kRecordReduceOpCount = 5;

// DataType (common/data_type.h) goes into records as its underlying value; pin it.
inline constexpr uint8_t kRecordDataTypeCount = 11;
static_assert(static_cast<uint8_t>(DataType::kUint8) == 0 &&
                  static_cast<uint8_t>(DataType::kInt8) == 1 &&
                  static_cast<uint8_t>(DataType::kInt32) == 2 &&
                  static_cast<uint8_t>(DataType::kInt64) == 3 &&
                  static_cast<uint8_t>(DataType::kFloat16) == 4 &&
                  static_cast<uint8_t>(DataType::kBFloat16) == 5 &&
                  static_cast<uint8_t>(DataType::kFloat32) == 6 &&
                  static_cast<uint8_t>(DataType::kFloat64) == 7 &&
                  static_cast<uint8_t>(DataType::kInt16) == 8 &&
                  static_cast<uint8_t>(DataType::kUint16) == 9 &&
                  static_cast<uint8_t>(DataType::kBool) == 10 &&
                  static_cast<uint8_t>(kLastDataType) == kRecordDataTypeCount - 1,
              "DataType values are part of the arena protocol");
// StatusCode (common/status.h) goes in CompletionRecord::status as a byte; pin it.
static_assert(static_cast<int>(StatusCode::kOk) == 0 &&
                  static_cast<int>(StatusCode::kInvalidArgument) == 1 &&
                  static_cast<int>(StatusCode::kDeadlineExceeded) == 2 &&
                  static_cast<int>(StatusCode::kUnavailable) == 3 &&
                  static_cast<int>(StatusCode::kPermissionDenied) == 4 &&
                  static_cast<int>(StatusCode::kInternal) == 5 &&
                  static_cast<int>(StatusCode::kFailedPrecondition) == 6 &&
                  static_cast<int>(StatusCode::kAborted) == 7 &&
                  static_cast<int>(StatusCode::kUnimplemented) == 8,
              "StatusCode values are part of the arena protocol");
inline constexpr uint8_t kRecordStatusCodeCount = 9;

// ---- Records ----

// SubmissionRecord::flags
inline constexpr uint8_t kSubmitOutputInResultHeap = 1u << 0;  // sidecar allocates the output
// The tensors are in device (GPU) memory: input_offset names a DeviceTensorDescriptor in the
// client heap, input_bytes is still the tensor's size, output_offset is 0 and output_bytes is 0
// for allreduce and broadcast (the output has the input's size) or the device output's capacity
// for allgather, alltoall and reducescatter.
inline constexpr uint8_t kSubmitDeviceTensor = 1u << 1;
inline constexpr uint8_t kSubmitKnownFlags = kSubmitOutputInResultHeap | kSubmitDeviceTensor;

// One op (or release) from the client. Zero-initialise, fill, push. Shapes are the input's.
struct SubmissionRecord {
  uint64_t op_id;  // chosen by the client, echoed in the completion
  RecordKind kind;
  RecordOpType op_type;
  DataType dtype;
  RecordReduceOp reduce_op;
  uint8_t ndims;  // <= kMaxDims; 0 is a scalar (one element)
  uint8_t flags;  // kSubmit*
  uint16_t name_len;
  int32_t root;         // broadcast: set rank of the root
  int32_t process_set;  // 0: the world
  double prescale;      // allreduce, reducescatter
  double postscale;
  // Client-heap ranges. Output: allreduce/broadcast exactly input-sized (may equal the input:
  // in place); allgather/alltoall/reducescatter a capacity the sidecar checks after negotiation.
  // With kSubmitOutputInResultHeap both must be 0 and the completion says where the output is.
  // kReleaseResult: output_offset is the result-heap block to free.
  uint64_t input_offset;
  uint64_t input_bytes;
  uint64_t output_offset;
  uint64_t output_bytes;
  uint64_t group_id;       // grouped allreduce: records sharing a group id are fused together
  uint32_t group_size;     // 0: not grouped; else the number of records in the group
  uint32_t num_splits;     // alltoall: 0 (even split) or one per set rank
  uint64_t splits_offset;  // num_splits > kMaxInlineSplits: int64[num_splits] in the client heap
  int64_t dims[kMaxDims];
  char name[kMaxNameBytes];          // name_len bytes, no NUL; empty: the engine names it
  uint8_t reserved[24];              // zero
  int64_t splits[kMaxInlineSplits];  // num_splits <= kMaxInlineSplits
};
static_assert(std::is_trivially_copyable_v<SubmissionRecord>);
static_assert(std::is_standard_layout_v<SubmissionRecord>);
static_assert(sizeof(SubmissionRecord) == 896, "SubmissionRecord is part of the arena protocol");
static_assert(sizeof(SubmissionRecord) % kCacheLineBytes == 0);
static_assert(offsetof(SubmissionRecord, dims) % 8 == 0 &&
              offsetof(SubmissionRecord, splits) ==
                  sizeof(SubmissionRecord) - 8 * kMaxInlineSplits);

// DeviceBufferRecord::handle_kind: what mem_handle holds.
// The allocation's legacy IPC handle (cudaIpcGetMemHandle).
inline constexpr uint32_t kDeviceHandleIpc = 0;
// Memory without a legacy IPC handle (cuMemCreate: PyTorch's expandable segments), whose pieces
// the trainer sent as file descriptors on the memory channel (memory_fd_message.h) under an export
// id: mem_handle's first 8 bytes are that id (little-endian), the other 56 are zero.
inline constexpr uint32_t kDeviceHandleExported = 1;

// One device buffer of a DeviceTensorDescriptor: the allocation it lies in, as its owner exported
// it (cudaIpcGetMemHandle of the allocation, or an export id: handle_kind; PyTorch's caching
// allocator hands out blocks of larger allocations), and the tensor's offset from the allocation's
// base. The sidecar opens each allocation once and keeps it open, keyed by (device,
// allocation_base): a base that comes back with another handle is a new allocation, and the old
// mapping is closed.
struct DeviceBufferRecord {
  uint8_t mem_handle[64];
  uint64_t allocation_base;   // the base address in the trainer's process
  uint64_t allocation_bytes;  // > 0
  uint64_t offset;            // offset + tensor bytes <= allocation_bytes
  uint32_t handle_kind;       // kDeviceHandle*
  uint32_t reserved;          // zero
};
static_assert(sizeof(DeviceBufferRecord) == 96);

// DeviceTensorDescriptor::flags
inline constexpr uint32_t kDeviceReadyEvent = 1u << 0;  // event_handle is set
inline constexpr uint32_t kDeviceKnownFlags = kDeviceReadyEvent;

// Where a device op's tensors are (kSubmitDeviceTensor), in the client heap. The ready event is an
// interprocess event the trainer recorded on its stream after the tensor's producer: the sidecar
// runs the collective only once it has completed. Output may equal input (in place).
struct DeviceTensorDescriptor {
  uint8_t device_uuid[16];  // the device's UUID: ordinals differ between the two processes
  uint32_t flags;           // kDevice*
  uint32_t reserved0;       // zero
  uint64_t reserved1[5];    // zero
  uint8_t event_handle[64];
  DeviceBufferRecord input;
  DeviceBufferRecord output;
};
static_assert(std::is_trivially_copyable_v<DeviceTensorDescriptor>);
static_assert(sizeof(DeviceTensorDescriptor) == 320,
              "DeviceTensorDescriptor is part of the arena protocol");

// CompletionRecord::flags
inline constexpr uint8_t kCompleteMessageTruncated = 1u << 0;
inline constexpr uint8_t kCompleteOutputInResultHeap = 1u << 1;  // release it when done
inline constexpr uint8_t kCompleteSplitsInResultHeap = 1u << 2;  // ditto (received splits)

// The sidecar's answer to one op record.
struct CompletionRecord {
  uint64_t op_id;
  uint8_t status;  // korovod::StatusCode
  uint8_t flags;   // kComplete*
  uint8_t ndims;   // output shape
  uint8_t reserved0;
  uint16_t message_len;  // bytes of message, <= kMaxMessageBytes
  uint16_t reserved1;
  int32_t last_joined_rank;  // join
  int32_t process_set_id;
  uint64_t output_offset;  // in the result heap (flag) or the client heap (the client's output)
  uint64_t output_bytes;
  uint32_t num_received_splits;  // alltoall: one per set rank
  uint32_t reserved2;
  uint64_t received_splits_offset;  // > kMaxInlineSplits: int64[n] block in the result heap
  int64_t dims[kMaxDims];
  char message[kMaxMessageBytes];  // the error, truncated (flag) to fit
  uint8_t reserved3[56];
  int64_t received_splits[kMaxInlineSplits];
};
static_assert(std::is_trivially_copyable_v<CompletionRecord>);
static_assert(std::is_standard_layout_v<CompletionRecord>);
static_assert(sizeof(CompletionRecord) == 1088, "CompletionRecord is part of the arena protocol");
static_assert(sizeof(CompletionRecord) % kCacheLineBytes == 0);

// Sets name/name_len; InvalidArgument if it does not fit or contains a NUL.
Status SetName(SubmissionRecord& r, std::string_view name);
std::string_view NameOf(const SubmissionRecord& r);  // clamped to kMaxNameBytes
// Sets status, message (truncated with the flag when longer than kMaxMessageBytes).
void SetStatus(CompletionRecord& r, const Status& s);
// Decodes status+message (an out-of-range code reads as kInternal).
Status StatusOf(const CompletionRecord& r);

// ---- Layout ----

struct Region {
  uint64_t offset = 0;  // from the arena's start
  uint64_t bytes = 0;
  // [off, off+len) relative to the region lies inside it (no overflow).
  bool Contains(uint64_t off, uint64_t len) const { return off <= bytes && len <= bytes - off; }
  friend bool operator==(const Region&, const Region&) = default;
};

// What the sidecar asks for; ComputeArenaLayout rounds heaps up to pages.
struct ArenaSizes {
  uint32_t submission_slots = 1024;  // power of two in [kMinQueueSlots, kMaxQueueSlots]
  uint32_t completion_slots = 1024;
  // The most each heap may grow to: both sides map this much address space, but /dev/shm
  // pages are only reserved (posix_fallocate) as the heaps grow into it.
  uint64_t client_heap_bytes = uint64_t{64} << 20;  // (0, kMaxHeapBytes]
  uint64_t result_heap_bytes = uint64_t{64} << 20;
  // Reserved in /dev/shm at creation: the header and queues, and this much of each heap (capped
  // at the heap's size). A too-small /dev/shm is then a clear error from Create, and growth past
  // it a clear error from Arena::Reserve, never a SIGBUS on first touch.
  uint64_t heap_reserve_bytes = uint64_t{64} << 20;
  // Off: nothing is reserved, pages come on first touch (tests of layout and queues only).
  bool reserve_memory = true;
};

// Where everything is. Written into the header by the sidecar; each side keeps a private copy
// and never re-reads it from shared memory.
struct ArenaLayout {
  uint64_t total_bytes = 0;
  uint32_t submission_slots = 0;
  uint32_t completion_slots = 0;
  Region submission_queue;
  Region completion_queue;
  Region client_heap;
  Region result_heap;
  friend bool operator==(const ArenaLayout&, const ArenaLayout&) = default;
};
static_assert(std::is_trivially_copyable_v<ArenaLayout>);
static_assert(sizeof(ArenaLayout) == 80);

// The one layout for these sizes (InvalidArgument naming the bad size).
StatusOr<ArenaLayout> ComputeArenaLayout(const ArenaSizes& sizes);

// ---- Header page ----

// A 32-bit shared word alone on its cache line (futex words must be 32-bit and aligned).
struct alignas(kCacheLineBytes) SharedWord {
  std::atomic<uint32_t> value;
};
static_assert(sizeof(SharedWord) == kCacheLineBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// One SPSC queue's indices and doorbells (see op_queue.h). Counters wrap; capacity is a power of
// two so `count & (capacity - 1)` is the slot.
struct QueueControl {
  SharedWord head;              // records pushed; written by the producer
  SharedWord tail;              // records popped; written by the consumer
  SharedWord consumer_bell;     // futex the consumer sleeps on; bumped after a push
  SharedWord consumer_waiting;  // 1 while the consumer is (about to be) asleep
  SharedWord producer_bell;     // futex the producer sleeps on (queue full); bumped after a pop
  SharedWord producer_waiting;
  SharedWord closed;  // 1 once either side closed the queue (shutdown)
};

struct ArenaHeader {
  // Offsets 0 and 8 never move, in any version: magic (stored last, release) and version.
  std::atomic<uint64_t> magic;
  uint32_t protocol_version;
  uint32_t header_bytes;  // kArenaPageBytes
  uint32_t submission_record_bytes;
  uint32_t completion_record_bytes;
  ArenaLayout layout;
  uint8_t reserved[16];
  // Liveness: sidecar_alive is 1 from Create until the sidecar's Arena is destroyed;
  // client_alive 1 while a client has it open (Open refuses a second client);
  // client_generation counts the clients that have attached.
  SharedWord sidecar_alive;
  SharedWord client_alive;
  SharedWord client_generation;
  SharedWord sidecar_pid;
  SharedWord client_pid;
  // Bumped by the sidecar's op loop every ~100 ms: a client that sees it stand still for the op
  // timeout knows its sidecar is stopped (SIGSTOP) or starved, not merely busy.
  SharedWord sidecar_heartbeat;
  QueueControl submission;
  QueueControl completion;
};
static_assert(std::is_standard_layout_v<ArenaHeader>);
static_assert(sizeof(ArenaHeader) <= kArenaPageBytes);
static_assert(offsetof(ArenaHeader, magic) == 0 && offsetof(ArenaHeader, protocol_version) == 8);
static_assert(offsetof(ArenaHeader, sidecar_alive) % kCacheLineBytes == 0);

}  // namespace korovod::sidecar
