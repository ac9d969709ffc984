// TrainerGpu: what a device op needs from the trainer's own GPU runtime, framework-free: the
// allocation a tensor lies in, exported by IPC handle; a device-to-device copy on the
// framework's stream; an interprocess event recorded on that stream. Two implementations:
// CudaDriverGpu (the CUDA driver API, loaded at run time: cuda_driver_gpu.h) for TensorFlow's
// GPU kernels, and a host-memory one in the tests (over runtime/device's HostDeviceApi, as the
// sidecar's KOROVOD_DEVICE_BACKEND=host), so the device ops' logic runs on machines without GPU.
// Every call returns "" or why it failed.
#pragma once

#include <cstdint>
#include <string>

#include "sidecar/client/c_api.h"

namespace korovod::tf {

class TrainerGpu {
 public:
  virtual ~TrainerGpu() = default;

  // The UUID of the device `data` lies on, and the allocation it lies in (IPC handle, base,
  // size) with its offset there.
  virtual std::string Export(const void* data, unsigned char uuid[16],
                             KorovodDeviceBuffer* buffer) = 0;
  // Enqueues a copy of `bytes` from `src` to `dst` (both on one device) on `stream`.
  virtual std::string CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) = 0;
  // Records a new interprocess event on `stream` (of the device `data` lies on), now: its IPC
  // handle in `handle`, this process's event in *event, to be destroyed once the op completed.
  virtual std::string RecordEvent(const void* data, void* stream, unsigned char handle[64],
                                  void** event) = 0;
  virtual void DestroyEvent(const void* data, void* event) = 0;
};

}  // namespace korovod::tf
