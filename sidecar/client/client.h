// Client: the C++ trainer-side library of the korovod sidecar. Connect opens a gRPC session over
// the sidecar's unix socket (Hello, protocol version check) and maps the shared-memory arena it
// names. Ops are submitted through the arena's submission queue and completed by a completion
// thread; tensors either live in the arena already (an ArenaBuffer, or a plain pointer into the
// client heap: zero copy) or are staged from other memory (one memcpy in, one out; counted in
// copy_stats()). Thread-safe.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "common/deadline.h"
#include "common/engine_stats.h"
#include "common/op_type.h"
#include "common/reduce_op.h"
#include "common/status.h"
#include "common/tensor_shape.h"
#include "sidecar/arena/memory_fd_message.h"

namespace korovod::sidecar {

class ClientCore;
struct HandleState;

// A block of the arena's client heap; freed when destroyed. Move-only.
class ArenaBuffer {
 public:
  ArenaBuffer() = default;
  ArenaBuffer(std::shared_ptr<ClientCore> core, uint64_t offset, uint64_t bytes, std::byte* data);
  ~ArenaBuffer();
  ArenaBuffer(ArenaBuffer&& o) noexcept;
  ArenaBuffer& operator=(ArenaBuffer&& o) noexcept;
  ArenaBuffer(const ArenaBuffer&) = delete;
  ArenaBuffer& operator=(const ArenaBuffer&) = delete;

  std::byte* data() const { return data_; }
  uint64_t size() const { return bytes_; }
  uint64_t offset() const { return offset_; }  // in the client heap
  bool valid() const { return core_ != nullptr; }
  template <typename T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  void Reset();
  std::shared_ptr<ClientCore> core_;
  uint64_t offset_ = 0;
  uint64_t bytes_ = 0;
  std::byte* data_ = nullptr;
};

// One submitted op. The output of ops whose size is known only at completion (allgather,
// alltoall, reducescatter) stays in the sidecar's result heap until the handle is destroyed.
class ClientHandle {
 public:
  ClientHandle() = default;
  explicit ClientHandle(std::shared_ptr<HandleState> s) : state_(std::move(s)) {}

  bool Poll() const;
  // Runs `callback` once the op has completed (at once, on this thread, if it has): on the
  // client's completion thread, a waiting thread, or the one closing the client. It must be short
  // and must not wait on other handles (hand longer work to another thread).
  void OnDone(std::function<void()> callback) const;
  // The op's status, or DeadlineExceeded (the op stays in flight).
  Status Wait(Deadline deadline = Deadline::Infinite()) const;
  // Once Poll() is true (or in an OnDone callback): the op's status.
  Status status() const;
  // After a successful Wait:
  const TensorShape& shape() const;                     // output shape
  std::span<const std::byte> output() const;            // result-heap or staged output bytes
  const std::vector<int64_t>& received_splits() const;  // alltoall
  int last_joined_rank() const;                         // join
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<HandleState> state_;
};

// What the client copied between the caller's memory and the arena since Connect. Zero-copy
// tensors add nothing; a staged allreduce adds its bytes in and out.
struct ClientCopyStats {
  uint64_t staged_in_bytes = 0;   // memcpy caller -> arena at submission
  uint64_t staged_out_bytes = 0;  // memcpy arena -> caller at completion
  uint64_t staged_tensors = 0;    // inputs copied into a staging block
  uint64_t arena_tensors = 0;     // inputs read where they lie in the arena
};

struct OpOptions {
  std::string name;  // the same on every rank; empty: named by op order
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  int process_set = 0;
};

// A plain-pointer tensor of a grouped allreduce.
struct GroupTensor {
  const void* input = nullptr;
  void* output = nullptr;
  TensorShape shape;
  std::string name;
};

// A tensor in device (GPU) memory as its owner exports it: the IPC handle of the allocation it
// lies in (cudaIpcGetMemHandle; PyTorch's storage._share_cuda_() gives the same), that
// allocation's base address and size in this process, and the tensor's offset from the base.
// The sidecar maps the allocation once and reads and writes the tensor there: no host copy.
// Memory without a legacy IPC handle (cuMemCreate: PyTorch's expandable segments) is named by an
// export id instead (handle_kind kDeviceHandleExported; mem_handle's first 8 bytes), whose pieces
// went to the sidecar with SendDeviceMemory first.
struct DeviceTensorRef {
  std::array<uint8_t, 16> device_uuid{};  // the device's UUID (ordinals differ per process)
  std::array<std::byte, 64> mem_handle{};
  uint32_t handle_kind = 0;  // kDeviceHandleIpc or kDeviceHandleExported (arena_layout.h)
  uint64_t allocation_base = 0;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;
};
// An interprocess event (cudaIpcGetEventHandle) recorded on the trainer's stream after the work
// that produces the tensor: the collective starts once it has completed.
using DeviceEventHandle = std::array<std::byte, 64>;

class Client {
 public:
  static StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& socket_path,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(10000),
      const std::string& client_name = "korovod C++ client");
  ~Client();  // stops the completion thread and detaches from the arena
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  int cross_rank() const;
  int cross_size() const;
  const std::string& session_id() const;
  uint32_t epoch() const;  // elastic: the membership epoch of this session; 0: a static job
  // The sidecar's device backend ("nccl", "host", "none"; "" from a sidecar that predates it) and
  // NCCL version code (0 unless "nccl").
  const std::string& device_backend() const;
  int nccl_version() const;

  // A block of the client heap. When the heap is full, waits for ops in flight to complete and
  // free space (the heap also grows, up to the sidecar's KOROVOD_ARENA_HEAP_MAX_MIB, while
  // /dev/shm has room); DeadlineExceeded after the allocation timeout, InvalidArgument at once
  // for a block larger than the whole heap. Ops on memory outside the arena stage through this.
  StatusOr<ArenaBuffer> Allocate(uint64_t bytes);
  // Allocate without waiting: Unavailable at once when nothing fits, or when the block would
  // leave less than `keep_free_bytes` of the heap's capacity free (so that long-lived tensors do
  // not starve the staging of other ops).
  StatusOr<ArenaBuffer> TryAllocate(uint64_t bytes, uint64_t keep_free_bytes = 0);
  // The client heap's capacity in bytes (KOROVOD_ARENA_HEAP_MAX_MIB: address space, backed as
  // used) and whether [data, data + bytes) lies inside it.
  uint64_t client_heap_capacity() const;
  bool InArena(const void* data, uint64_t bytes) const;
  ClientCopyStats copy_stats() const;
  static constexpr std::chrono::milliseconds kDefaultAllocationTimeout{std::chrono::minutes(5)};
  void set_allocation_timeout(std::chrono::milliseconds timeout);

  // Zero copy: tensors in the arena. `output` may be `input` (in place).
  StatusOr<ClientHandle> Allreduce(const ArenaBuffer& input, const ArenaBuffer& output,
                                   DataType dtype, const TensorShape& shape,
                                   const OpOptions& options = {});
  StatusOr<ClientHandle> Allgather(const ArenaBuffer& input, DataType dtype,
                                   const TensorShape& shape, const OpOptions& options = {});
  StatusOr<ClientHandle> Broadcast(const ArenaBuffer& tensor, DataType dtype,
                                   const TensorShape& shape, const OpOptions& options = {});
  StatusOr<ClientHandle> Alltoall(const ArenaBuffer& input, DataType dtype,
                                  const TensorShape& shape, const std::vector<int64_t>& splits,
                                  const OpOptions& options = {});
  StatusOr<ClientHandle> ReduceScatter(const ArenaBuffer& input, DataType dtype,
                                       const TensorShape& shape, const OpOptions& options = {});

  // Plain pointers. A tensor inside the client heap (InArena, e.g. the data of an ArenaBuffer
  // handed out as a torch tensor) is used where it lies, as with the overloads above; any other
  // is copied into a staging block, and an output of known size outside the arena is copied to
  // `output` on completion. Outputs of unknown size are read from the handle.
  StatusOr<ClientHandle> Allreduce(const void* input, void* output, DataType dtype,
                                   const TensorShape& shape, const OpOptions& options = {});
  StatusOr<ClientHandle> Allgather(const void* input, DataType dtype, const TensorShape& shape,
                                   const OpOptions& options = {});
  StatusOr<ClientHandle> Broadcast(void* tensor, DataType dtype, const TensorShape& shape,
                                   const OpOptions& options = {});
  StatusOr<ClientHandle> Alltoall(const void* input, DataType dtype, const TensorShape& shape,
                                  const std::vector<int64_t>& splits,
                                  const OpOptions& options = {});
  StatusOr<ClientHandle> ReduceScatter(const void* input, DataType dtype, const TensorShape& shape,
                                       const OpOptions& options = {});
  StatusOr<std::vector<ClientHandle>> GroupedAllreduce(const std::vector<GroupTensor>& tensors,
                                                       DataType dtype,
                                                       const OpOptions& options = {});
  // Device memory without an IPC handle: each export's pieces as file descriptors (borrowed, one
  // per piece, in order), on the memory channel; OK once the sidecar holds them for this session.
  // Send an allocation once, before the first op that names its export id.
  Status SendDeviceMemory(const std::vector<MemoryExport>& exports, std::span<const int> fds);
  // Device tensors (the sidecar needs a device backend: KOROVOD_DEVICE_BACKEND). `output` may be
  // `input` (in place); both on one device. Completion means the result is in device memory: the
  // sidecar's stream has finished, so any later work of the trainer sees it.
  StatusOr<ClientHandle> DeviceAllreduce(const DeviceTensorRef& input,
                                         const DeviceTensorRef& output, DataType dtype,
                                         const TensorShape& shape,
                                         const DeviceEventHandle* ready_event = nullptr,
                                         const OpOptions& options = {});
  StatusOr<ClientHandle> DeviceBroadcast(const DeviceTensorRef& tensor, DataType dtype,
                                         const TensorShape& shape,
                                         const DeviceEventHandle* ready_event = nullptr,
                                         const OpOptions& options = {});
  // `output` holds `output_bytes`: at least the gathered rows (every rank's first dimension,
  // which the caller learns first, e.g. by a CPU allgather of the sizes) / this rank's block of
  // the first dimension (the first ranks get one more row). The handle's shape is the output's.
  StatusOr<ClientHandle> DeviceAllgather(const DeviceTensorRef& input,
                                         const DeviceTensorRef& output, uint64_t output_bytes,
                                         DataType dtype, const TensorShape& shape,
                                         const DeviceEventHandle* ready_event = nullptr,
                                         const OpOptions& options = {});
  // `splits`: rows of the first dimension sent to each set rank (empty: even); the handle's
  // received_splits say what came from each.
  StatusOr<ClientHandle> DeviceAlltoall(const DeviceTensorRef& input, const DeviceTensorRef& output,
                                        uint64_t output_bytes, DataType dtype,
                                        const TensorShape& shape,
                                        const std::vector<int64_t>& splits,
                                        const DeviceEventHandle* ready_event = nullptr,
                                        const OpOptions& options = {});
  StatusOr<ClientHandle> DeviceReduceScatter(const DeviceTensorRef& input,
                                             const DeviceTensorRef& output, uint64_t output_bytes,
                                             DataType dtype, const TensorShape& shape,
                                             const DeviceEventHandle* ready_event = nullptr,
                                             const OpOptions& options = {});
  StatusOr<ClientHandle> Barrier(const OpOptions& options = {});
  StatusOr<ClientHandle> Join(const OpOptions& options = {});

  // Control plane (gRPC).
  StatusOr<int> AddProcessSet(const std::vector<int>& ranks);
  // Collective like AddProcessSet; false when no set has that id (or it is 0, the world).
  StatusOr<bool> RemoveProcessSet(int id);
  // This process's rank in process set `id` and the set's size, for sets this client added (and
  // the world, 0); InvalidArgument otherwise. Device ops size their outputs with it
  // (reducescatter).
  struct SetPosition {
    int rank = 0;
    int size = 0;
  };
  StatusOr<SetPosition> ProcessSetPosition(int id) const;
  Status StartTimeline(const std::string& path, bool mark_cycles = false);
  Status StopTimeline();
  StatusOr<EngineStats> GetStats();
  // Elastic jobs: this session's membership epoch, and whether the membership moved since it
  // formed (hvd.elastic's commit asks). Static jobs: all zeros.
  struct Membership {
    uint32_t epoch = 0;
    uint64_t formed_version = 0;
    uint64_t version = 0;
    int update = 0;  // Horovod's HostUpdateResult bits: 1 removed, 2 added
  };
  StatusOr<Membership> GetMembership();
  Status Shutdown(const std::string& reason = {});

  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace korovod::sidecar
