// DeviceOp: one korovod collective on tensors in GPU memory, as a framework's GPU kernel runs it,
// framework-free so that its logic is tested on CPU (tests/sidecar/tensorflow, over host memory).
// The tensors never leave the device: the input and output travel to the sidecar as IPC handles
// of their allocations (TrainerGpu::Export) with an interprocess event recorded on the
// framework's stream after the output is allocated, so that the kernels producing the input and
// those that last used the output's memory (a stream-ordered allocator hands out memory that
// queued kernels may still use) finish before the collective reads or writes. The op completes
// once the sidecar's stream has drained: the result is in device memory for the framework's next
// kernels.
//
// Outputs whose size this rank cannot know alone take a small host op first, as korovod.torch's
// device path does (ADR 0013): allgather gathers every rank's first dimension ("<name>.rows"),
// alltoall exchanges the splits ("<name>.splits"); reducescatter's block is this rank's share of
// the first dimension in the process set (the first ranks get one more row).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sidecar/client/c_api.h"
#include "sidecar/tensorflow/trainer_gpu.h"

namespace korovod::tf {

// A device op's outcome: a korovod status code (0: OK) with its message, and alltoall's
// received splits.
struct DeviceOpResult {
  int code = 0;
  std::string message;
  std::vector<int64_t> received_splits;
};

struct DeviceOpCalls {
  // Allocates the output of `dims` on the input's device; null with *err when it cannot. A
  // zero-byte output may be null.
  std::function<void*(const std::vector<int64_t>& dims, std::string* err)> allocate_output;
  // Device memory of `bytes` that lives until `done` has run (a placeholder for an empty tensor,
  // which has no allocation to export); null with *err when it cannot.
  std::function<void*(uint64_t bytes, std::string* err)> allocate_scratch;
  // Runs `work` off the client's completion thread (the framework's worker pool).
  std::function<void(std::function<void()>)> schedule;
  // Called once: on a thread `schedule` gave, or on the caller's when nothing was submitted.
  std::function<void(DeviceOpResult)> done;
};

struct DeviceOpRequest {
  KorovodOpSpec spec;    // kind, name, dtype, dims, reduce op, scaling, root, set, splits
  const void* input;     // device memory; broadcast's output starts as a copy of it
  uint64_t input_bytes;  // of the whole input tensor
  void* stream;          // the framework's stream for this kernel (CUstream)
};

// Bytes of one element of korovod's dtype `dtype`; 0 for an unknown one.
uint64_t DeviceElementBytes(int dtype);

// Runs one device op to completion through `calls`. The session (ClientSession) is acquired for
// each submission; `gpu` must outlive the op.
void RunDeviceOp(TrainerGpu* gpu, const DeviceOpRequest& request, DeviceOpCalls calls);

}  // namespace korovod::tf
