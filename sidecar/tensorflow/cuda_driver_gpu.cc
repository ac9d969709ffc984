#include "sidecar/tensorflow/cuda_driver_gpu.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <map>

namespace korovod::tf {

// The driver's entry points this file calls, resolved by their versioned names (cuda.h maps
// cuMemGetAddressRange to cuMemGetAddressRange_v2 and so on; dlsym needs the real symbol).
struct CudaDriverGpu::Driver {
  void* lib = nullptr;
  decltype(&::cuInit) init;
  decltype(&::cuGetErrorName) error_name;
  decltype(&::cuPointerGetAttribute) pointer_attribute;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuDeviceGetUuid_v2) device_uuid;
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain;
  decltype(&::cuCtxPushCurrent) ctx_push;
  decltype(&::cuCtxPopCurrent) ctx_pop;
  decltype(&::cuMemGetAddressRange) address_range;
  decltype(&::cuIpcGetMemHandle) ipc_mem_handle;
  decltype(&::cuMemcpyDtoDAsync) copy_dtod;
  decltype(&::cuEventCreate) event_create;
  decltype(&::cuEventRecord) event_record;
  decltype(&::cuIpcGetEventHandle) ipc_event_handle;
  decltype(&::cuEventDestroy) event_destroy;

  std::mutex mu;
  std::map<int, CUcontext> contexts;  // primary contexts retained, per device ordinal

  std::string Error(CUresult rc, const char* what) const {
    const char* name = nullptr;
    if (error_name(rc, &name) != CUDA_SUCCESS || name == nullptr) name = "?";
    return std::string(what) + " failed: CUDA driver error " + std::to_string(rc) + " (" + name +
           ")";
  }

  // The primary context (TensorFlow's) of the device `data` lies on, made current while the
  // scope lives; the ordinal in *ordinal.
  std::string Enter(const void* data, int* ordinal) {
    int dev_ordinal = -1;
    CUresult rc = pointer_attribute(&dev_ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    reinterpret_cast<CUdeviceptr>(data));
    if (rc != CUDA_SUCCESS) return Error(rc, "cuPointerGetAttribute (is the tensor on a GPU?)");
    CUcontext ctx = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = contexts.find(dev_ordinal);
      if (it == contexts.end()) {
        CUdevice dev = 0;
        rc = device_get(&dev, dev_ordinal);
        if (rc != CUDA_SUCCESS) return Error(rc, "cuDeviceGet");
        rc = primary_ctx_retain(&ctx, dev);
        if (rc != CUDA_SUCCESS) return Error(rc, "cuDevicePrimaryCtxRetain");
        contexts.emplace(dev_ordinal, ctx);
      } else {
        ctx = it->second;
      }
    }
    rc = ctx_push(ctx);
    if (rc != CUDA_SUCCESS) return Error(rc, "cuCtxPushCurrent");
    *ordinal = dev_ordinal;
    return {};
  }
  void Leave() {
    CUcontext popped = nullptr;
    ctx_pop(&popped);
  }
};

namespace {

// The symbol cuda.h's macros map a name to (cuCtxPushCurrent -> "cuCtxPushCurrent_v2").
#define KOROVOD_CU_SYMBOL2(x) #x
#define KOROVOD_CU_SYMBOL(x) KOROVOD_CU_SYMBOL2(x)

template <typename Fn>
bool Resolve(void* lib, const char* symbol, Fn* fn, std::string* err) {
  *fn = reinterpret_cast<Fn>(::dlsym(lib, symbol));
  if (*fn == nullptr && err->empty()) {
    *err = std::string("libcuda.so.1 has no ") + symbol + " (a CUDA driver too old?)";
  }
  return *fn != nullptr;
}

}  // namespace

CudaDriverGpu::CudaDriverGpu(std::unique_ptr<Driver> driver) : driver_(std::move(driver)) {}
CudaDriverGpu::~CudaDriverGpu() = default;  // the library stays loaded: TensorFlow uses it too

CudaDriverGpu* CudaDriverGpu::Get(std::string* err) {
  static std::mutex mu;
  static std::unique_ptr<CudaDriverGpu> instance;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mu);
  if (instance != nullptr) return instance.get();
  if (!failure.empty()) {
    *err = failure;
    return nullptr;
  }
  auto d = std::make_unique<Driver>();
  d->lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d->lib == nullptr) {
    const char* why = ::dlerror();
    failure = std::string("GPU tensors need the CUDA driver (libcuda.so.1): ") +
              (why != nullptr ? why : "not found");
    *err = failure;
    return nullptr;
  }
  std::string e;
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuInit), &d->init, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuGetErrorName), &d->error_name, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuPointerGetAttribute), &d->pointer_attribute, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuDeviceGet), &d->device_get, &e);
  Resolve(d->lib, "cuDeviceGetUuid_v2", &d->device_uuid, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuDevicePrimaryCtxRetain), &d->primary_ctx_retain, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuCtxPushCurrent), &d->ctx_push, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuCtxPopCurrent), &d->ctx_pop, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuMemGetAddressRange), &d->address_range, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuIpcGetMemHandle), &d->ipc_mem_handle, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuMemcpyDtoDAsync), &d->copy_dtod, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuEventCreate), &d->event_create, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuEventRecord), &d->event_record, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuIpcGetEventHandle), &d->ipc_event_handle, &e);
  Resolve(d->lib, KOROVOD_CU_SYMBOL(cuEventDestroy), &d->event_destroy, &e);
  if (e.empty()) {
    const CUresult rc = d->init(0);
    if (rc != CUDA_SUCCESS) e = d->Error(rc, "cuInit");
  }
  if (!e.empty()) {
    failure = e;
    *err = failure;
    return nullptr;
  }
  instance.reset(new CudaDriverGpu(std::move(d)));  // NOLINT: the constructor is private
  return instance.get();
}

std::string CudaDriverGpu::Export(const void* data, unsigned char uuid[16],
                                  KorovodDeviceBuffer* buffer) {
  Driver& d = *driver_;
  int ordinal = -1;
  std::string err = d.Enter(data, &ordinal);
  if (!err.empty()) return err;
  CUdevice dev = 0;
  CUuuid id;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUipcMemHandle handle;
  CUresult rc = d.device_get(&dev, ordinal);
  if (rc == CUDA_SUCCESS) rc = d.device_uuid(&id, dev);
  if (rc != CUDA_SUCCESS) {
    err = d.Error(rc, "cuDeviceGetUuid");
  } else if ((rc = d.address_range(&base, &size, reinterpret_cast<CUdeviceptr>(data))) !=
             CUDA_SUCCESS) {
    err = d.Error(rc, "cuMemGetAddressRange");
  } else if ((rc = d.ipc_mem_handle(&handle, base)) != CUDA_SUCCESS) {
    // Memory from a stream-ordered pool (TF_GPU_ALLOCATOR=cuda_malloc_async) has no IPC handle.
    err = d.Error(rc, "cuIpcGetMemHandle") +
          "; GPU tensors must come from TensorFlow's default (BFC) allocator, not "
          "TF_GPU_ALLOCATOR=cuda_malloc_async";
  }
  d.Leave();
  if (!err.empty()) return err;
  static_assert(sizeof(id.bytes) == 16 && sizeof(handle.reserved) == 64);
  std::memcpy(uuid, id.bytes, 16);
  std::memcpy(buffer->mem_handle, handle.reserved, 64);
  buffer->allocation_base = static_cast<uint64_t>(base);
  buffer->allocation_bytes = static_cast<uint64_t>(size);
  buffer->offset = reinterpret_cast<uint64_t>(data) - static_cast<uint64_t>(base);
  return {};
}

std::string CudaDriverGpu::CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) {
  Driver& d = *driver_;
  int ordinal = -1;
  std::string err = d.Enter(dst, &ordinal);
  if (!err.empty()) return err;
  const CUresult rc =
      d.copy_dtod(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                  static_cast<CUstream>(stream));
  d.Leave();
  return rc == CUDA_SUCCESS ? std::string() : d.Error(rc, "cuMemcpyDtoDAsync");
}

std::string CudaDriverGpu::RecordEvent(const void* data, void* stream, unsigned char handle[64],
                                       void** event) {
  Driver& d = *driver_;
  int ordinal = -1;
  std::string err = d.Enter(data, &ordinal);
  if (!err.empty()) return err;
  CUevent ev = nullptr;
  CUipcEventHandle h;
  CUresult rc = d.event_create(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
  if (rc != CUDA_SUCCESS) {
    err = d.Error(rc, "cuEventCreate");
  } else if ((rc = d.event_record(ev, static_cast<CUstream>(stream))) != CUDA_SUCCESS) {
    err = d.Error(rc, "cuEventRecord");
  } else if ((rc = d.ipc_event_handle(&h, ev)) != CUDA_SUCCESS) {
    err = d.Error(rc, "cuIpcGetEventHandle");
  }
  if (!err.empty() && ev != nullptr) d.event_destroy(ev);
  d.Leave();
  if (!err.empty()) return err;
  std::memcpy(handle, h.reserved, 64);
  *event = ev;
  return {};
}

void CudaDriverGpu::DestroyEvent(const void* data, void* event) {
  Driver& d = *driver_;
  int ordinal = -1;
  if (!d.Enter(data, &ordinal).empty()) return;
  d.event_destroy(static_cast<CUevent>(event));
  d.Leave();
}

}  // namespace korovod::tf
