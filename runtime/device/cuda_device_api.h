// CudaDeviceApi: DeviceApi on the CUDA runtime (cudaIpc*, events, streams, cudaMemcpyAsync).
// Plain C++ against cuda_runtime_api.h, built without nvcc where cmake/Nccl.cmake finds CUDA.
// Each call binds the device it names first (CUDA's current device is per thread).
#pragma once

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
  StatusOr<IpcEventHandle> RecordIpcEvent(int device, DeviceStream stream,
                                          DeviceEvent* event) override;
};

}  // namespace korovod
