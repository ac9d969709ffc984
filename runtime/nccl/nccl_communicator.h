// NcclCommunicator: collectives on CUDA device buffers through NCCL, for the ranks of an existing
// CPU Communicator. The CPU communicator only carries the bootstrap (NCCL's unique id and each
// rank's readiness); tensor bytes move over NCCL's own transports (NVLink, PCIe, IB, sockets).
//
// Every wait is bounded: init by the CPU communicator's connect_timeout, each collective by its
// op_timeout. A wait that expires, or any NCCL error, aborts the NCCL communicator (ncclCommAbort,
// so a hung kernel is torn down instead of blocking the process) and leaves this object broken:
// later calls return the same error at once. Recovery is a new NcclCommunicator, as for the CPU
// side.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/collectives/collectives.h"

struct ncclComm;  // nccl.h stays an implementation detail of the .cc

namespace korovod {

class Communicator;

// CUDA devices visible to this process; 0 when there is no driver or no GPU (never an error, so
// callers and tests can fall back to the CPU path).
int CudaDeviceCount();
// The NCCL library's version code (ncclGetVersion, e.g. 22105 for 2.21.5); 0 if it cannot say.
int NcclVersion();

class NcclCommunicator {
 public:
  // Collective over `cpu`'s world, or over `set`'s members when given (its ranks are then the
  // set ranks): every member calls it with the CUDA device it drives (one device per rank; NCCL
  // does not support two ranks on one device). The unique id travels in the CPU allgather over
  // the engine's authenticated connections. Errors name the failing rank. The result does not
  // refer to `cpu` or `set` afterwards.
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(Communicator& cpu, int device,
                                                            const ProcessSet* set = nullptr);

  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  const Status& broken() const { return broken_; }

  // The collectives take the CPU API's options with device pointers for input/output, enqueue on
  // `stream` and return once the stream has drained (so also after any earlier work on it), or
  // with DeadlineExceeded after op_timeout. `set` must be null or of
  // this communicator's own set (a communicator is made per set). AllreduceOptions::algorithm is
  // ignored (NCCL chooses).
  //
  // prescale/postscale: for floating-point Sum and Average they are folded, with Average's 1/size,
  // into one factor applied to each input before the sum (ncclRedOpCreatePreMulSum). Equal to
  // scaling before and after up to rounding, and needs no CUDA kernel of our own (the backend is
  // plain C++, built without nvcc). Any other op or integer type with a factor other than 1 returns
  // Unimplemented. Integer Average is NCCL's: the sum divided by size, truncated toward zero (as
  // on the CPU). Invalid arguments are refused before anything is enqueued and leave the
  // communicator usable; every failure after that breaks it.
  Status Allreduce(const AllreduceOptions& opts, cudaStream_t stream);
  // Equal counts use ncclAllGather; uneven ones a group of one ncclBroadcast per rank.
  Status Allgather(const AllgatherOptions& opts, cudaStream_t stream);
  Status Broadcast(const BroadcastOptions& opts, cudaStream_t stream);
  // Grouped ncclSend/ncclRecv; this rank's own block is a device copy. input and output must not
  // overlap.
  Status Alltoall(const AlltoallOptions& opts, cudaStream_t stream);
  // Equal counts use ncclReduceScatter; uneven ones a group of one ncclReduce per rank.
  Status ReduceScatter(const ReduceScatterOptions& opts, cudaStream_t stream);
  // A one-element allreduce: returns once every rank has reached it and `stream` has drained.
  Status Barrier(cudaStream_t stream);

 private:
  struct DeviceFree {
    void operator()(void* p) const;
  };
  using DeviceBuffer = std::unique_ptr<void, DeviceFree>;
  // Only Create can name it, so only Create constructs (through make_unique).
  struct Key {
    explicit Key() = default;
  };

 public:
  NcclCommunicator(Key, ncclComm* comm, int rank, int size, int device,
                   std::chrono::milliseconds op_timeout, DeviceBuffer scratch);

 private:
  // "nccl rank 1 (device 0) allreduce of 1024 float32 (sum)"
  std::string Describe(const char* op, size_t count, DataType type) const;
  Status Usable(const ProcessSet* set, const std::string& what) const;
  // Turns an NCCL call's result into a Status; ncclInProgress (the communicator is non-blocking)
  // is waited out until `deadline`.
  Status Check(int nccl_result, const std::string& what, Deadline deadline);
  Status WaitStream(cudaStream_t stream, const std::string& what, Deadline deadline);
  // Aborts the NCCL communicator and records `s` as the broken state; returns `s`.
  Status Fail(Status s);
  // Reduction operator for op/type/scales; *custom set when it must be destroyed after use.
  StatusOr<int> MakeRedOp(ReduceOp op, DataType type, double prescale, double postscale,
                          const std::string& what, Deadline deadline, bool* custom);
  void DestroyRedOp(int op);

  ncclComm* comm_;  // null once aborted
  int rank_;
  int size_;
  int device_;
  std::chrono::milliseconds op_timeout_;
  Status broken_;
  DeviceBuffer scratch_;  // a few bytes for Barrier and the unused recv buffer of non-roots
};

}  // namespace korovod
