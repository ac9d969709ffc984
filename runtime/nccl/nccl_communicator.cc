#include "runtime/nccl/nccl_communicator.h"

#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/data_type.h"
#include "common/function_ref.h"
#include "runtime/world/communicator.h"

// ncclCommInitRankConfig (non-blocking init, which the init deadline needs) and ncclGetLastError;
// cmake/Nccl.cmake enforces the same floor.
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0), "korovod needs NCCL 2.14 or newer");

namespace korovod {
namespace {

// Polls without burning a core on long waits: a small collective completes in microseconds, so
// spin (yielding) first, then sleep between polls.
class Backoff {
 public:
  void Pause() {
    if (++polls_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  int polls_ = 0;
};

// Binds the calling thread to `device` for NCCL init and buffer allocation (both use the current
// device), and restores the caller's device afterwards.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    error_ = cudaSetDevice(device);
  }
  ~ScopedDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

Status CudaStatus(cudaError_t e, const std::string& what) {
  (void)cudaGetLastError();  // clear the non-sticky error so it is not reported again later
  return Internal(what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

Status NcclStatus(ncclResult_t r, const std::string& what, ncclComm_t comm) {
  StatusCode code = StatusCode::kInternal;
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
      code = StatusCode::kUnavailable;
      break;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      code = StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  std::string msg = what + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += " (" + std::string(last) + ")";
  return Status(code, msg);
}

Status Unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }

StatusOr<ncclDataType_t> ToNccl(DataType t) {
  switch (t) {
    case DataType::kUint8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
#if defined(__CUDA_BF16_TYPES_EXIST__)
      return ncclBfloat16;
#else
      // nccl.h only declares ncclBfloat16 when the CUDA headers have bfloat16 (CUDA 11+).
      return Unimplemented("bfloat16 needs NCCL built against CUDA 11 or newer");
#endif
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kBool:  // 0/1 bytes; MakeRedOp reduces them with max (or) and min (and)
      return ncclUint8;
    case DataType::kInt16:
    case DataType::kUint16:
      return Unimplemented(std::string(DataTypeName(t)) +
                           " has no NCCL data type; the NCCL backend moves and reduces "
                           "uint8, int8, int32, int64 and floating-point tensors and bool");
  }
  return InvalidArgument("unknown data type");
}

bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

// The PreMulSum scalar in the tensor's own type (ncclScalarHostImmediate reads it at creation).
union Scalar {
  uint16_t bits16;
  float f32;
  double f64;
};

Scalar MakeScalar(DataType t, double v) {
  Scalar s{};
  switch (t) {
    case DataType::kFloat16:
      s.bits16 = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      s.bits16 = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat64:
      s.f64 = v;
      break;
    default:
      s.f32 = static_cast<float>(v);
      break;
  }
  return s;
}

bool AllEqual(std::span<const size_t> counts) {
  for (size_t c : counts) {
    if (c != counts[0]) return false;
  }
  return true;
}

// Element offsets of each rank's block.
std::vector<size_t> Offsets(std::span<const size_t> counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

const std::byte* At(const void* base, size_t elements, size_t elem_size) {
  return static_cast<const std::byte*>(base) + elements * elem_size;
}
std::byte* At(void* base, size_t elements, size_t elem_size) {
  return static_cast<std::byte*>(base) + elements * elem_size;
}

// What each rank contributes to the one CPU allgather before NCCL init: its readiness, so that a
// local failure on one rank (no such device, no memory) is reported by every rank, naming it,
// instead of leaving the others to time out in ncclCommInitRank; and, from rank 0, the NCCL
// unique id (an allgather rather than a broadcast, so one CPU round carries both).
struct InitReady {
  ncclUniqueId id;
  uint8_t ok;
  char reason[127];
};

// Enqueues `calls` inside one NCCL group. The group is closed even when a call failed, as NCCL
// requires; the first failure wins.
ncclResult_t RunGroup(FunctionRef<ncclResult_t()> calls) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t first = calls();
  ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int NcclVersion() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

void NcclCommunicator::DeviceFree::operator()(void* p) const { (void)cudaFree(p); }

NcclCommunicator::NcclCommunicator(Key, ncclComm* comm, int rank, int size, int device,
                                   std::chrono::milliseconds op_timeout, DeviceBuffer scratch)
    : comm_(comm),
      rank_(rank),
      size_(size),
      device_(device),
      op_timeout_(op_timeout),
      scratch_(std::move(scratch)) {}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(Communicator& cpu, int device,
                                                                     const ProcessSet* set) {
  if (set != nullptr && !set->contains_me()) {
    return InvalidArgument("nccl init on rank " + std::to_string(cpu.rank()) +
                           ": not a member of the process set");
  }
  const int rank = set != nullptr ? set->rank() : cpu.rank();
  const int size = set != nullptr ? set->size() : cpu.size();
  const std::string who = "nccl init on rank " + std::to_string(cpu.rank()) +
                          (set != nullptr ? " (set rank " + std::to_string(rank) + ")" : "") +
                          " (device " + std::to_string(device) + ")";

  // Local steps first; their outcome is shared with every rank below. The device stays bound
  // until init, which attaches the communicator to the current device.
  std::string local_error;
  std::optional<ScopedDevice> bind;
  DeviceBuffer scratch;
  ncclUniqueId id{};
  const int devices = CudaDeviceCount();
  if (devices == 0) {
    local_error = "no CUDA device (no driver or no GPU)";
  } else if (device < 0 || device >= devices) {
    local_error = "device " + std::to_string(device) + " out of range, " + std::to_string(devices) +
                  " visible";
  } else if (bind.emplace(device); bind->error() != cudaSuccess) {
    local_error = CudaStatus(bind->error(), "cudaSetDevice").message();
  } else {
    void* raw = nullptr;
    cudaError_t e = cudaMalloc(&raw, 64);
    if (e != cudaSuccess) {
      local_error = CudaStatus(e, "cudaMalloc of scratch").message();
    } else {
      scratch.reset(raw);
      if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) local_error = NcclStatus(r, "ncclGetUniqueId", nullptr).message();
      }
    }
  }

  std::vector<InitReady> ready(size);
  InitReady mine{};
  mine.id = id;
  mine.ok = local_error.empty() ? 1 : 0;
  std::strncpy(mine.reason, local_error.c_str(), sizeof(mine.reason) - 1);
  std::vector<size_t> counts(size, sizeof(InitReady));
  AllgatherOptions gather;
  gather.input = &mine;
  gather.output = ready.data();
  gather.counts = counts;
  gather.type = DataType::kUint8;
  gather.set = set;
  KV_RETURN_IF_ERROR(::korovod::Allgather(cpu, gather).WithContext(who + ": readiness exchange"));
  if (!local_error.empty()) return FailedPrecondition(who + ": " + local_error);
  for (int r = 0; r < size; ++r) {
    if (!ready[r].ok) {
      const InitReady& bad = ready[r];
      const int global = set != nullptr ? set->global_rank(r) : r;
      return Aborted(who + ": rank " + std::to_string(global) + " cannot join: " +
                     std::string(bad.reason, strnlen(bad.reason, sizeof(bad.reason))));
    }
  }
  id = ready[0].id;

  // Non-blocking init so that a rank that never joins costs connect_timeout, not forever.
  const std::chrono::milliseconds timeout = cpu.options().connect_timeout;
  const Deadline deadline = Deadline::After(timeout);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    Status s = NcclStatus(r, who + ": ncclCommInitRankConfig", comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return s;
  }
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      Status s =
          NcclStatus(r != ncclSuccess ? r : state, who + " of " + std::to_string(size), comm);
      (void)ncclCommAbort(comm);
      return s;
    }
    if (state == ncclSuccess) break;
    if (deadline.Expired()) {
      (void)ncclCommAbort(comm);
      return DeadlineExceeded(who + " of " + std::to_string(size) + ": not complete after " +
                              Ms(timeout) + " (not every rank joined); aborted");
    }
    backoff.Pause();
  }

  return std::make_unique<NcclCommunicator>(Key{}, comm, rank, size, device,
                                            cpu.options().op_timeout, std::move(scratch));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // Finalize flushes outstanding work and waits for the peers to quiesce; bounded like any other
  // wait, with abort as the fallback so destruction never hangs on a vanished peer.
  const Deadline deadline = Deadline::After(op_timeout_);
  ncclResult_t state = ncclCommFinalize(comm_);
  Backoff backoff;
  while (state == ncclInProgress && !deadline.Expired()) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
    if (state == ncclInProgress) backoff.Pause();
  }
  if (state == ncclSuccess) {
    (void)ncclCommDestroy(comm_);
  } else {
    (void)ncclCommAbort(comm_);
  }
}

std::string NcclCommunicator::Describe(const char* op, size_t count, DataType type) const {
  return "nccl rank " + std::to_string(rank_) + " (device " + std::to_string(device_) + ") " + op +
         " of " + std::to_string(count) + " " + DataTypeName(type);
}

Status NcclCommunicator::Usable(const ProcessSet* set, const std::string& what) const {
  if (!broken_.ok()) return broken_;
  if (set != nullptr && set->size() != size_) {
    return InvalidArgument(what + ": a process set of " + std::to_string(set->size()) +
                           " ranks on a communicator of " + std::to_string(size_) +
                           " (one NCCL communicator per set)");
  }
  return OkStatus();
}

Status NcclCommunicator::Fail(Status s) {
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (broken_.ok()) broken_ = s;
  return s;
}

Status NcclCommunicator::Check(int nccl_result, const std::string& what, Deadline deadline) {
  auto r = static_cast<ncclResult_t>(nccl_result);
  if (r == ncclSuccess) return OkStatus();
  if (r != ncclInProgress) return Fail(NcclStatus(r, what, comm_));
  // A non-blocking communicator may still be enqueuing; no other NCCL call is allowed until its
  // state leaves ncclInProgress.
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return Fail(NcclStatus(r, what, comm_));
    if (state == ncclSuccess) return OkStatus();
    if (state != ncclInProgress) return Fail(NcclStatus(state, what, comm_));
    if (deadline.Expired()) {
      return Fail(DeadlineExceeded(what + ": not enqueued after " + Ms(op_timeout_) +
                                   "; NCCL communicator aborted"));
    }
    backoff.Pause();
  }
}

Status NcclCommunicator::WaitStream(cudaStream_t stream, const std::string& what,
                                    Deadline deadline) {
  Backoff backoff;
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return OkStatus();
    if (e != cudaErrorNotReady) return Fail(CudaStatus(e, what + ": cudaStreamQuery"));
    // A peer's failure surfaces here (remote error, lost connection) rather than on the stream.
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) return Fail(NcclStatus(r, what, comm_));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(NcclStatus(state, what, comm_));
    }
    if (deadline.Expired()) {
      return Fail(DeadlineExceeded(what + ": not complete after " + Ms(op_timeout_) +
                                   " (a peer is slow, hung or gone); NCCL communicator aborted"));
    }
    backoff.Pause();
  }
}

StatusOr<int> NcclCommunicator::MakeRedOp(ReduceOp op, DataType type, double prescale,
                                          double postscale, const std::string& what,
                                          Deadline deadline, bool* custom) {
  *custom = false;
  const bool scaled = prescale != 1.0 || postscale != 1.0;
  if (type == DataType::kBool && !scaled) {  // logical or / and, as the CPU kernels reduce bool
    return static_cast<int>(op == ReduceOp::kMin || op == ReduceOp::kProduct ? ncclMin : ncclMax);
  }
  if (!scaled) {
    switch (op) {
      case ReduceOp::kSum:
        return static_cast<int>(ncclSum);
      case ReduceOp::kAverage:
        return static_cast<int>(ncclAvg);
      case ReduceOp::kMin:
        return static_cast<int>(ncclMin);
      case ReduceOp::kMax:
        return static_cast<int>(ncclMax);
      case ReduceOp::kProduct:
        return static_cast<int>(ncclProd);
    }
    return InvalidArgument(what + ": unknown reduce op");
  }
  if ((op != ReduceOp::kSum && op != ReduceOp::kAverage) || !IsFloat(type)) {
    return Unimplemented(what + ": prescale/postscale with " + ReduceOpName(op) + " on " +
                         DataTypeName(type) +
                         " needs a scaling kernel; the NCCL backend scales only floating-point "
                         "sum and average");
  }
  const double factor =
      prescale * postscale / (op == ReduceOp::kAverage ? static_cast<double>(size_) : 1.0);
  KV_ASSIGN_OR_RETURN(ncclDataType_t dt, ToNccl(type));
  Scalar scalar = MakeScalar(type, factor);
  ncclRedOp_t red{};
  KV_RETURN_IF_ERROR(Check(
      ncclRedOpCreatePreMulSum(&red, &scalar, dt, ncclScalarHostImmediate, comm_), what, deadline));
  *custom = true;
  return static_cast<int>(red);
}

void NcclCommunicator::DestroyRedOp(int op) {
  // After a failure the communicator was aborted, which freed its operators too.
  if (comm_ != nullptr) (void)ncclRedOpDestroy(static_cast<ncclRedOp_t>(op), comm_);
}

Status NcclCommunicator::Allreduce(const AllreduceOptions& o, cudaStream_t stream) {
  const std::string what = Describe("allreduce", o.count, o.type) + " (" + ReduceOpName(o.op) + ")";
  KV_RETURN_IF_ERROR(Usable(o.set, what));
  if (o.count == 0) return OkStatus();  // every rank has the same count, so every rank skips
  if (o.input == nullptr || o.output == nullptr) return InvalidArgument(what + ": null buffer");
  KV_ASSIGN_OR_RETURN(ncclDataType_t dt, ToNccl(o.type));
  const Deadline deadline = Deadline::After(op_timeout_);
  bool custom = false;
  KV_ASSIGN_OR_RETURN(int red,
                      MakeRedOp(o.op, o.type, o.prescale, o.postscale, what, deadline, &custom));
  Status s = Check(
      ncclAllReduce(o.input, o.output, o.count, dt, static_cast<ncclRedOp_t>(red), comm_, stream),
      what, deadline);
  if (custom) DestroyRedOp(red);  // allowed once the call that uses it has returned
  KV_RETURN_IF_ERROR(s);
  return WaitStream(stream, what, deadline);
}

Status NcclCommunicator::Allgather(const AllgatherOptions& o, cudaStream_t stream) {
  const std::vector<size_t> off = Offsets(o.counts);
  const std::string what = Describe("allgather", off.back(), o.type);
  KV_RETURN_IF_ERROR(Usable(o.set, what));
  if (static_cast<int>(o.counts.size()) != size_) {
    return InvalidArgument(what + ": " + std::to_string(o.counts.size()) + " counts for " +
                           std::to_string(size_) + " ranks");
  }
  if (off.back() == 0) return OkStatus();
  if (o.output == nullptr || (o.input == nullptr && o.counts[rank_] > 0)) {
    return InvalidArgument(what + ": null buffer");
  }
  KV_ASSIGN_OR_RETURN(ncclDataType_t dt, ToNccl(o.type));
  const size_t esz = DataTypeSize(o.type);
  const Deadline deadline = Deadline::After(op_timeout_);
  ncclResult_t r;
  if (AllEqual(o.counts)) {
    r = ncclAllGather(o.input, o.output, o.counts[0], dt, comm_, stream);
  } else {
    // Allgatherv as one broadcast per rank, fused into a single launch by the group.
    r = RunGroup([&]() -> ncclResult_t {
      for (int root = 0; root < size_; ++root) {
        if (o.counts[root] == 0) continue;
        void* dst = At(o.output, off[root], esz);
        const void* src = root == rank_ ? o.input : dst;
        ncclResult_t e = ncclBroadcast(src, dst, o.counts[root], dt, root, comm_, stream);
        if (e != ncclSuccess) return e;
      }
      return ncclSuccess;
    });
  }
  KV_RETURN_IF_ERROR(Check(r, what, deadline));
  return WaitStream(stream, what, deadline);
}

Status NcclCommunicator::Broadcast(const BroadcastOptions& o, cudaStream_t stream) {
  const std::string what =
      Describe("broadcast", o.count, o.type) + " from rank " + std::to_string(o.root);
  KV_RETURN_IF_ERROR(Usable(o.set, what));
  if (o.root < 0 || o.root >= size_) return InvalidArgument(what + ": root out of range");
  if (o.count == 0) return OkStatus();
  if (o.buffer == nullptr) return InvalidArgument(what + ": null buffer");
  KV_ASSIGN_OR_RETURN(ncclDataType_t dt, ToNccl(o.type));
  const Deadline deadline = Deadline::After(op_timeout_);
  KV_RETURN_IF_ERROR(
      Check(ncclBroadcast(o.buffer, o.buffer, o.count, dt, o.root, comm_, stream), what, deadline));
  return WaitStream(stream, what, deadline);
}

Status NcclCommunicator::Alltoall(const AlltoallOptions& o, cudaStream_t stream) {
  const std::vector<size_t> soff = Offsets(o.send_counts);
  const std::vector<size_t> roff = Offsets(o.recv_counts);
  const std::string what = Describe("alltoall", soff.back(), o.type);
  KV_RETURN_IF_ERROR(Usable(o.set, what));
  if (static_cast<int>(o.send_counts.size()) != size_ ||
      static_cast<int>(o.recv_counts.size()) != size_) {
    return InvalidArgument(what + ": send/recv counts must have one entry per rank (" +
                           std::to_string(size_) + ")");
  }
  if (o.send_counts[rank_] != o.recv_counts[rank_]) {
    return InvalidArgument(what + ": sends " + std::to_string(o.send_counts[rank_]) +
                           " elements to itself but expects " +
                           std::to_string(o.recv_counts[rank_]));
  }
  if ((soff.back() > 0 && o.input == nullptr) || (roff.back() > 0 && o.output == nullptr)) {
    return InvalidArgument(what + ": null buffer");
  }
  if (soff.back() == 0 && roff.back() == 0) return OkStatus();
  KV_ASSIGN_OR_RETURN(ncclDataType_t dt, ToNccl(o.type));
  const size_t esz = DataTypeSize(o.type);
  const Deadline deadline = Deadline::After(op_timeout_);
  if (o.send_counts[rank_] > 0) {
    cudaError_t e = cudaMemcpyAsync(At(o.output, roff[rank_], esz), At(o.input, soff[rank_], esz),
                                    o.send_counts[rank_] * esz, cudaMemcpyDeviceToDevice, stream);
    // The peers are about to wait for this rank's sends: break the communicator rather than
    // leave it out of step with them.
    if (e != cudaSuccess) return Fail(CudaStatus(e, what + ": cudaMemcpyAsync of own block"));
  }
  ncclResult_t r = RunGroup([&]() -> ncclResult_t {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (o.send_counts[peer] > 0) {
        ncclResult_t e =
            ncclSend(At(o.input, soff[peer], esz), o.send_counts[peer], dt, peer, comm_, stream);
        if (e != ncclSuccess) return e;
      }
      if (o.recv_counts[peer] > 0) {
        ncclResult_t e =
            ncclRecv(At(o.output, roff[peer], esz), o.recv_counts[peer], dt, peer, comm_, stream);
        if (e != ncclSuccess) return e;
      }
    }
    return ncclSuccess;
  });
  KV_RETURN_IF_ERROR(Check(r, what, deadline));
  return WaitStream(stream, what, deadline);
}

Status NcclCommunicator::ReduceScatter(const ReduceScatterOptions& o, cudaStream_t stream) {
  const std::vector<size_t> off = Offsets(o.recv_counts);
  const std::string what =
      Describe("reducescatter", off.back(), o.type) + " (" + ReduceOpName(o.op) + ")";
  KV_RETURN_IF_ERROR(Usable(o.set, what));
  if (static_cast<int>(o.recv_counts.size()) != size_) {
    return InvalidArgument(what + ": " + std::to_string(o.recv_counts.size()) + " counts for " +
                           std::to_string(size_) + " ranks");
  }
  if (off.back() == 0) return OkStatus();
  if (o.input == nullptr || (o.output == nullptr && o.recv_counts[rank_] > 0)) {
    return InvalidArgument(what + ": null buffer");
  }
  KV_ASSIGN_OR_RETURN(ncclDataType_t dt, ToNccl(o.type));
  const size_t esz = DataTypeSize(o.type);
  const Deadline deadline = Deadline::After(op_timeout_);
  bool custom = false;
  KV_ASSIGN_OR_RETURN(int red_int,
                      MakeRedOp(o.op, o.type, o.prescale, o.postscale, what, deadline, &custom));
  const auto red = static_cast<ncclRedOp_t>(red_int);
  ncclResult_t r;
  if (AllEqual(o.recv_counts)) {
    r = ncclReduceScatter(o.input, o.output, o.recv_counts[0], dt, red, comm_, stream);
  } else {
    // Uneven blocks: one reduce to each block's owner, fused by the group. Non-owners never
    // write their recv buffer, so they pass the scratch buffer.
    r = RunGroup([&]() -> ncclResult_t {
      for (int root = 0; root < size_; ++root) {
        if (o.recv_counts[root] == 0) continue;
        void* dst = root == rank_ ? o.output : scratch_.get();
        ncclResult_t e = ncclReduce(At(o.input, off[root], esz), dst, o.recv_counts[root], dt, red,
                                    root, comm_, stream);
        if (e != ncclSuccess) return e;
      }
      return ncclSuccess;
    });
  }
  Status s = Check(r, what, deadline);
  if (custom) DestroyRedOp(red_int);
  KV_RETURN_IF_ERROR(s);
  return WaitStream(stream, what, deadline);
}

Status NcclCommunicator::Barrier(cudaStream_t stream) {
  const std::string what =
      "nccl rank " + std::to_string(rank_) + " (device " + std::to_string(device_) + ") barrier";
  KV_RETURN_IF_ERROR(Usable(nullptr, what));
  const Deadline deadline = Deadline::After(op_timeout_);
  void* buf = scratch_.get();
  KV_RETURN_IF_ERROR(
      Check(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm_, stream), what, deadline));
  return WaitStream(stream, what, deadline);
}

}  // namespace korovod
