// Decoding of untrusted submission records: the one place where bytes the trainer wrote into
// the arena become typed values. Every field is checked; an error names the op id, the field and
// its value. Never crashes, never returns a range outside the client heap, whatever the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "common/status.h"
#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar {

struct ValidatedOp {
  RecordKind kind = RecordKind::kOp;
  uint64_t op_id = 0;

  // kOp
  RecordOpType type = RecordOpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  RecordReduceOp reduce_op = RecordReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  int32_t process_set = 0;
  std::string name;            // may be empty: the engine names it
  std::vector<int64_t> shape;  // the input's
  int64_t num_elements = 0;    // 0 for barrier/join
  Region input;                // relative to the client heap; {0, 0} without data
  bool output_in_result_heap = false;
  Region output;                // relative to the client heap unless output_in_result_heap
  std::vector<int64_t> splits;  // alltoall: empty (even) or one per set rank, sum == shape[0]
  uint64_t group_id = 0;
  uint32_t group_size = 0;  // 0: not grouped
  // kSubmitDeviceTensor: the tensors are device memory described by `device` (a checked copy);
  // `input` is then the descriptor's client-heap range and `output` is empty.
  bool on_device = false;
  DeviceTensorDescriptor device{};
  uint64_t device_output_bytes = 0;  // the device output's size (allgather: its capacity)

  // kReleaseResult: the result-heap block to free (64-aligned, inside the result heap; whether it
  // is allocated is the allocator's call).
  uint64_t release_offset = 0;
};

// `client_heap` is this process's mapping of layout.client_heap (needed only to copy splits
// stored there; they are copied before they are checked).
StatusOr<ValidatedOp> ValidateSubmission(const SubmissionRecord& record, const ArenaLayout& layout,
                                         std::span<const std::byte> client_heap = {});

// Client side: checks a completion from the sidecar before its offsets are dereferenced (status
// code, message length, ndims/dims, output range inside the heap its flag names, received splits).
Status ValidateCompletion(const CompletionRecord& record, const ArenaLayout& layout);

}  // namespace korovod::sidecar
