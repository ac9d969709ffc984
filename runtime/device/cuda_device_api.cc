#include "runtime/device/cuda_device_api.h"

#include <cuda_runtime_api.h>

#include <cstring>

namespace korovod {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kIpcHandleBytes);
static_assert(sizeof(cudaUUID_t) == sizeof(DeviceUuid));

Status CudaError(cudaError_t e, const std::string& what) {
  (void)cudaGetLastError();  // clear a non-sticky error so it is not reported again later
  return Internal(what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

Status Bind(int device, const char* call) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    return CudaError(e, std::string(call) + ": cudaSetDevice(" + std::to_string(device) + ")");
  }
  return OkStatus();
}

Status Query(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  if (e == cudaErrorNotReady) return NotReady(what);
  return CudaError(e, what);
}

}  // namespace

int CudaDeviceApi::DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

StatusOr<DeviceUuid> CudaDeviceApi::UuidOf(int device) {
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    return CudaError(e, "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  }
  DeviceUuid u{};
  std::memcpy(u.data(), prop.uuid.bytes, u.size());
  return u;
}

StatusOr<int> CudaDeviceApi::DeviceOf(const DeviceUuid& uuid) {
  const int n = DeviceCount();
  for (int d = 0; d < n; ++d) {
    KV_ASSIGN_OR_RETURN(DeviceUuid u, UuidOf(d));
    if (u == uuid) return d;
  }
  return FailedPrecondition("none of the " + std::to_string(n) +
                            " CUDA devices this process sees has UUID " + UuidString(uuid) +
                            " (the sidecar must see the trainer's GPUs: docs/adr/0012)");
}

StatusOr<void*> CudaDeviceApi::OpenMemHandle(int device, const IpcMemHandle& handle) {
  KV_RETURN_IF_ERROR(Bind(device, "cudaIpcOpenMemHandle"));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof h);
  void* base = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) return CudaError(e, "cudaIpcOpenMemHandle");
  return base;
}

Status CudaDeviceApi::CloseMemHandle(int device, void* base) {
  KV_RETURN_IF_ERROR(Bind(device, "cudaIpcCloseMemHandle"));
  const cudaError_t e = cudaIpcCloseMemHandle(base);
  return e == cudaSuccess ? OkStatus() : CudaError(e, "cudaIpcCloseMemHandle");
}

StatusOr<DeviceEvent> CudaDeviceApi::OpenEventHandle(int device, const IpcEventHandle& handle) {
  KV_RETURN_IF_ERROR(Bind(device, "cudaIpcOpenEventHandle"));
  cudaIpcEventHandle_t h;
  std::memcpy(&h, handle.data(), sizeof h);
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaIpcOpenEventHandle(&ev, h);
  if (e != cudaSuccess) return CudaError(e, "cudaIpcOpenEventHandle");
  return static_cast<DeviceEvent>(ev);
}

Status CudaDeviceApi::QueryEvent(DeviceEvent event) {
  return Query(cudaEventQuery(static_cast<cudaEvent_t>(event)), "cudaEventQuery");
}

void CudaDeviceApi::DestroyEvent(DeviceEvent event) {
  (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

StatusOr<void*> CudaDeviceApi::Malloc(int device, size_t bytes) {
  KV_RETURN_IF_ERROR(Bind(device, "cudaMalloc"));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    return CudaError(
        e, "cudaMalloc of " + std::to_string(bytes) + " bytes on device " + std::to_string(device));
  }
  return p;
}

void CudaDeviceApi::Free(int device, void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = owned_.find(reinterpret_cast<uint64_t>(ptr));
    if (it != owned_.end()) {
      (void)UnmapRange(it->first, it->second, "Free");
      owned_.erase(it);
      return;
    }
  }
  if (Bind(device, "cudaFree").ok()) (void)cudaFree(ptr);
}

StatusOr<DeviceStream> CudaDeviceApi::CreateStream(int device) {
  KV_RETURN_IF_ERROR(Bind(device, "cudaStreamCreate"));
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return CudaError(e, "cudaStreamCreateWithFlags");
  return static_cast<DeviceStream>(s);
}

void CudaDeviceApi::DestroyStream(DeviceStream stream) {
  (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

Status CudaDeviceApi::CopyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) {
  if (bytes == 0) return OkStatus();
  const cudaError_t e =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? OkStatus()
                          : CudaError(e, "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
}

Status CudaDeviceApi::QueryStream(DeviceStream stream) {
  return Query(cudaStreamQuery(static_cast<cudaStream_t>(stream)), "cudaStreamQuery");
}

StatusOr<IpcMemHandle> CudaDeviceApi::ExportMemHandle(void* base) {
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, base);
  if (e != cudaSuccess) return CudaError(e, "cudaIpcGetMemHandle");
  IpcMemHandle out;
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

StatusOr<IpcEventHandle> CudaDeviceApi::RecordIpcEvent(int device, DeviceStream stream,
                                                       DeviceEvent* event) {
  KV_RETURN_IF_ERROR(Bind(device, "cudaEventCreate"));
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess);
  if (e != cudaSuccess) return CudaError(e, "cudaEventCreateWithFlags");
  cudaIpcEventHandle_t h;
  e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream));
  if (e == cudaSuccess) e = cudaIpcGetEventHandle(&h, ev);
  if (e != cudaSuccess) {
    (void)cudaEventDestroy(ev);
    return CudaError(e, "recording an interprocess event");
  }
  *event = static_cast<DeviceEvent>(ev);
  IpcEventHandle out;
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

}  // namespace korovod
