// Helpers shared by the sidecar protocol tests.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar::testing {

// A shm name no other test (or concurrent ctest process) uses.
inline std::string UniqueArenaName(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "/korovod-test-" + std::to_string(::getpid()) + "-" + tag + "-" +
         std::to_string(counter++);
}

inline ArenaSizes SmallSizes(uint32_t slots = 8) {
  ArenaSizes s;
  s.submission_slots = slots;
  s.completion_slots = slots;
  s.client_heap_bytes = 64 << 10;
  s.result_heap_bytes = 64 << 10;
  return s;
}

// A float32 sum allreduce record of `shape`, scale 1, no name: input and output ranges of the
// tensor's size at the given client-heap offsets (equal: in place).
inline SubmissionRecord FloatSumAllreduce(uint64_t op_id, std::vector<int64_t> shape,
                                          uint64_t input_offset, uint64_t output_offset) {
  SubmissionRecord r{};
  r.op_id = op_id;
  r.kind = RecordKind::kOp;
  r.op_type = RecordOpType::kAllreduce;
  r.dtype = DataType::kFloat32;
  r.reduce_op = RecordReduceOp::kSum;
  r.ndims = static_cast<uint8_t>(shape.size());
  uint64_t bytes = 4;
  for (size_t i = 0; i < shape.size(); ++i) {
    r.dims[i] = shape[i];
    bytes *= static_cast<uint64_t>(shape[i]);
  }
  r.prescale = 1.0;
  r.postscale = 1.0;
  r.input_offset = input_offset;
  r.input_bytes = bytes;
  r.output_offset = output_offset;
  r.output_bytes = bytes;
  return r;
}

// Waits for a forked child; its exit code, or 128 + signal.
inline int WaitChild(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace korovod::sidecar::testing
