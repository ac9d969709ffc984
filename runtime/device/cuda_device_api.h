// CudaDeviceApi: DeviceApi on the CUDA runtime (cudaIpc*, events, streams, cudaMemcpyAsync).
// Plain C++ against cuda_runtime_api.h, built without nvcc where cmake/Nccl.cmake finds CUDA.
// Each call binds the device it names first (CUDA's current device is per thread). Allocations
// without a legacy IPC handle (cuMemCreate) go through the driver's virtual memory calls, reached
// with cudaGetDriverEntryPoint so that nothing links libcuda (cuda_device_vmm.cc).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "runtime/device/device_api.h"

namespace korovod {

class CudaDeviceApi final : public DeviceApi {
 public:
  std::string_view name() const override { return "cuda"; }
  int DeviceCount() override;
  StatusOr<int> DeviceOf(const DeviceUuid& uuid) override;
  StatusOr<DeviceUuid> UuidOf(int device) override;

  StatusOr<void*> OpenMemHandle(int device, const IpcMemHandle& handle) override;
  Status CloseMemHandle(int device, void* base) override;
  StatusOr<void*> ImportShareable(int device, std::span<const ShareableChunk> chunks) override;
  Status CloseShareable(int device, void* base) override;
  StatusOr<DeviceEvent> OpenEventHandle(int device, const IpcEventHandle& handle) override;
  Status QueryEvent(DeviceEvent event) override;
  void DestroyEvent(DeviceEvent event) override;

  StatusOr<void*> Malloc(int device, size_t bytes) override;
  void Free(int device, void* ptr) override;
  StatusOr<DeviceStream> CreateStream(int device) override;
  void DestroyStream(DeviceStream stream) override;
  Status CopyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) override;
  Status QueryStream(DeviceStream stream) override;

  StatusOr<IpcMemHandle> ExportMemHandle(void* base) override;
  StatusOr<void*> MallocShareable(int device, size_t bytes) override;
  StatusOr<ShareableExport> ExportShareable(void* ptr) override;
  StatusOr<IpcEventHandle> RecordIpcEvent(int device, DeviceStream stream,
                                          DeviceEvent* event) override;

 private:
  // A reserved range with pieces mapped in it; `handle` is the one piece MallocShareable created
  // (0 for imports, whose pieces are released once mapped).
  struct VmmRange {
    uint64_t bytes;
    unsigned long long handle;
  };
  Status UnmapRange(uint64_t base, const VmmRange& r, const char* what);
  std::mutex mu_;
  std::map<uint64_t, VmmRange> imported_;  // by base
  std::map<uint64_t, VmmRange> owned_;     // by base: MallocShareable's
};

}  // namespace korovod
