// DeviceApi: the few device-runtime calls the engine and the sidecar make on tensors that live in
// accelerator memory: import another process's allocation and event (IPC handles), poll events,
// allocate, copy and drain a stream. Two implementations behind one interface:
// - CudaDeviceApi (cuda_device_api.h): the CUDA runtime (cudaIpcOpenMemHandle, cudaEventQuery,
//   cudaMemcpyAsync, ...), built where CUDA is found;
// - HostDeviceApi (host_device_api.h): "device" memory in POSIX shared memory and streams as
//   ordered worker threads, so the protocol built on these calls (handle caching, event ordering,
//   lifetimes, errors) runs and is tested on machines without a GPU.
// Code above this interface never knows which one it has.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/status.h"

namespace korovod {

// cudaIpcMemHandle_t and cudaIpcEventHandle_t are 64 opaque bytes; the host implementation uses
// the same size, so records carry either.
inline constexpr size_t kIpcHandleBytes = 64;
using IpcMemHandle = std::array<std::byte, kIpcHandleBytes>;
using IpcEventHandle = std::array<std::byte, kIpcHandleBytes>;
// A device's UUID (cudaDeviceProp::uuid): ordinals differ between processes that see different
// CUDA_VISIBLE_DEVICES, the UUID does not.
using DeviceUuid = std::array<uint8_t, 16>;
std::string UuidString(const DeviceUuid& uuid);  // "GPU-xxxxxxxx-xxxx-...", as nvidia-smi -L

// One physical piece of an allocation exported as a file descriptor (cuMemExportToShareableHandle
// with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; a memfd on the host implementation): memory that
// has no legacy IPC handle, as PyTorch's expandable segments (cuMemCreate) make it.
struct ShareableChunk {
  int fd = -1;         // borrowed: the caller keeps owning it
  uint64_t bytes = 0;  // the piece's size (a multiple of the device's mapping granularity)
};
// The owner's side of one piece: a new descriptor of it, and where it lies in the owner's process.
struct ShareableExport {
  Fd fd;
  uint64_t base = 0;
  uint64_t bytes = 0;
};

// Opaque handles of the implementation (cudaStream_t, cudaEvent_t, or host objects).
using DeviceStream = void*;
using DeviceEvent = void*;

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  virtual std::string_view name() const = 0;  // "cuda" or "host"
  // Devices this process sees; 0 when there is no driver or device (not an error).
  virtual int DeviceCount() = 0;
  // The ordinal in this process of the device with `uuid`; NotFound naming it otherwise.
  virtual StatusOr<int> DeviceOf(const DeviceUuid& uuid) = 0;
  virtual StatusOr<DeviceUuid> UuidOf(int device) = 0;

  // --- importing another process's memory and events ---
  // Maps the allocation `handle` names (exported by its owner) on `device`; the base address in
  // this process. Each successful open needs one CloseMemHandle.
  virtual StatusOr<void*> OpenMemHandle(int device, const IpcMemHandle& handle) = 0;
  virtual Status CloseMemHandle(int device, void* base) = 0;
  // Maps `chunks` back to back in one new range of this process's address space, readable and
  // writable on `device` (an allocation may be several physical pieces: PyTorch's expandable
  // segments map one per granule). The base in this process; the descriptors may be closed after.
  // The memory stays alive while it is mapped, whatever its owner does. Each successful import
  // needs one CloseShareable.
  virtual StatusOr<void*> ImportShareable(int device, std::span<const ShareableChunk> chunks) = 0;
  virtual Status CloseShareable(int device, void* base) = 0;
  // An event recorded by another process; destroyed with DestroyEvent.
  virtual StatusOr<DeviceEvent> OpenEventHandle(int device, const IpcEventHandle& handle) = 0;
  // OK once the work before the event's last record has completed; Unavailable("not ready")
  // while it has not; any other error is the device's.
  virtual Status QueryEvent(DeviceEvent event) = 0;
  virtual void DestroyEvent(DeviceEvent event) = 0;

  // --- memory, streams and copies of this process ---
  virtual StatusOr<void*> Malloc(int device, size_t bytes) = 0;
  virtual void Free(int device, void* ptr) = 0;
  virtual StatusOr<DeviceStream> CreateStream(int device) = 0;
  virtual void DestroyStream(DeviceStream stream) = 0;
  // Device-to-device copy enqueued on `stream`.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) = 0;
  // OK once everything enqueued on `stream` has completed; Unavailable("not ready") before.
  virtual Status QueryStream(DeviceStream stream) = 0;

  // --- exporting (the owner's side: trainers, tests) ---
  virtual StatusOr<IpcMemHandle> ExportMemHandle(void* base) = 0;
  // An allocation that has no legacy IPC handle and is exported as file descriptors (cuMemCreate
  // with the POSIX file descriptor handle type; a memfd on the host); freed with Free. Its size is
  // rounded up to the mapping granularity.
  virtual StatusOr<void*> MallocShareable(int device, size_t bytes) = 0;
  // The physical piece that `ptr` lies in, as a new descriptor, its base and size.
  virtual StatusOr<ShareableExport> ExportShareable(void* ptr) = 0;
  // A new interprocess event, recorded on `stream` now; `*event` is this process's handle of it.
  virtual StatusOr<IpcEventHandle> RecordIpcEvent(int device, DeviceStream stream,
                                                  DeviceEvent* event) = 0;
};

// Unavailable("not ready") of Query*.
bool IsNotReady(const Status& s);
Status NotReady(std::string what);
// Calls `query` (QueryStream, QueryEvent) until it is not "not ready": its result, or
// DeadlineExceeded naming `what` once `deadline` passes. Yields, then sleeps, between polls.
Status PollUntilReady(const std::function<Status()>& query, Deadline deadline,
                      const std::string& what);

}  // namespace korovod
