// CudaDeviceApi's allocations that cross as POSIX file descriptors (cuMemCreate memory: PyTorch's
// expandable segments). The driver's virtual memory calls are reached through
// cudaGetDriverEntryPoint, so the sidecar links only the CUDA runtime, as for everything else.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "runtime/device/cuda_device_api.h"

namespace korovod {
namespace {

// The driver entry points this file uses, looked up once.
struct Driver {
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 Import = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 Export = nullptr;
  PFN_cuMemRetainAllocationHandle_v11000 Retain = nullptr;
  PFN_cuMemRelease_v10020 Release = nullptr;
  PFN_cuMemCreate_v10020 Create = nullptr;
  PFN_cuMemAddressReserve_v10020 Reserve = nullptr;
  PFN_cuMemAddressFree_v10020 AddressFree = nullptr;
  PFN_cuMemMap_v10020 Map = nullptr;
  PFN_cuMemUnmap_v10020 Unmap = nullptr;
  PFN_cuMemSetAccess_v10020 SetAccess = nullptr;
  PFN_cuMemGetAddressRange_v3020 AddressRange = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 Granularity = nullptr;
  Status loaded;
};

template <typename F>
Status Load(const char* symbol, unsigned version, F* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &found);
#else
  (void)version;
  const cudaError_t e = cudaGetDriverEntryPoint(symbol, &p, cudaEnableDefault, &found);
#endif
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    return FailedPrecondition(std::string("the CUDA driver has no ") + symbol +
                              " (a driver for CUDA 11.0 or newer is needed for memory without "
                              "an IPC handle)");
  }
  *fn = reinterpret_cast<F>(p);
  return OkStatus();
}

const Driver& GetDriver() {
  static const Driver d = [] {
    Driver x;
    Status s = Load("cuGetErrorName", 6000, &x.GetErrorName);
    if (s.ok()) s = Load("cuMemImportFromShareableHandle", 10020, &x.Import);
    if (s.ok()) s = Load("cuMemExportToShareableHandle", 10020, &x.Export);
    if (s.ok()) s = Load("cuMemRetainAllocationHandle", 11000, &x.Retain);
    if (s.ok()) s = Load("cuMemRelease", 10020, &x.Release);
    if (s.ok()) s = Load("cuMemCreate", 10020, &x.Create);
    if (s.ok()) s = Load("cuMemAddressReserve", 10020, &x.Reserve);
    if (s.ok()) s = Load("cuMemAddressFree", 10020, &x.AddressFree);
    if (s.ok()) s = Load("cuMemMap", 10020, &x.Map);
    if (s.ok()) s = Load("cuMemUnmap", 10020, &x.Unmap);
    if (s.ok()) s = Load("cuMemSetAccess", 10020, &x.SetAccess);
    if (s.ok()) s = Load("cuMemGetAddressRange", 3020, &x.AddressRange);
    if (s.ok()) s = Load("cuMemGetAllocationGranularity", 10020, &x.Granularity);
    x.loaded = s;
    return x;
  }();
  return d;
}

Status DriverError(const Driver& d, CUresult r, const std::string& what) {
  const char* name = nullptr;
  if (d.GetErrorName != nullptr) d.GetErrorName(r, &name);
  return Internal(what + ": CUDA driver error " + std::to_string(static_cast<int>(r)) + " (" +
                  (name != nullptr ? name : "?") + ")");
}

// The driver (after cudaSetDevice(device): its primary context is current on this thread).
StatusOr<const Driver*> Bound(int device, const char* what) {
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Internal(std::string(what) + ": cudaSetDevice(" + std::to_string(device) +
                    "): " + cudaGetErrorName(e));
  }
  const Driver& d = GetDriver();
  KV_RETURN_IF_ERROR(d.loaded);
  return &d;
}

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

Status AllowReadWrite(const Driver& d, int device, CUdeviceptr base, uint64_t bytes) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult r = d.SetAccess(base, bytes, &access, 1);
  return r == CUDA_SUCCESS ? OkStatus() : DriverError(d, r, "cuMemSetAccess");
}

}  // namespace

Status CudaDeviceApi::UnmapRange(uint64_t base, const VmmRange& range, const char* what) {
  const Driver& d = GetDriver();
  KV_RETURN_IF_ERROR(d.loaded);
  CUresult r = d.Unmap(base, range.bytes);
  if (r != CUDA_SUCCESS) return DriverError(d, r, std::string(what) + ": cuMemUnmap");
  r = d.AddressFree(base, range.bytes);
  if (r != CUDA_SUCCESS) return DriverError(d, r, std::string(what) + ": cuMemAddressFree");
  if (range.handle != 0) (void)d.Release(range.handle);
  return OkStatus();
}

StatusOr<void*> CudaDeviceApi::ImportShareable(int device, std::span<const ShareableChunk> chunks) {
  KV_ASSIGN_OR_RETURN(const Driver* d, Bound(device, "cuMemImportFromShareableHandle"));
  if (chunks.empty()) return InvalidArgument("no pieces to import");
  uint64_t total = 0;
  for (const ShareableChunk& c : chunks) {
    if (c.bytes == 0 || total + c.bytes < total) return InvalidArgument("bad piece size");
    total += c.bytes;
  }
  CUdeviceptr base = 0;
  CUresult r = d->Reserve(&base, total, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    return DriverError(*d, r, "cuMemAddressReserve of " + std::to_string(total) + " bytes");
  }
  uint64_t mapped = 0;
  Status s;
  for (size_t i = 0; i < chunks.size() && s.ok(); ++i) {
    CUmemGenericAllocationHandle h = 0;
    // The driver checks the descriptor: one that is not an exported allocation fails here.
    r = d->Import(&h, reinterpret_cast<void*>(static_cast<intptr_t>(chunks[i].fd)),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) {
      s = DriverError(*d, r, "cuMemImportFromShareableHandle of piece " + std::to_string(i));
      break;
    }
    // A size larger than the piece is refused by cuMemMap.
    r = d->Map(base + mapped, chunks[i].bytes, 0, h, 0);
    (void)d->Release(h);  // the mapping holds the memory from here on
    if (r != CUDA_SUCCESS) {
      s = DriverError(*d, r,
                      "cuMemMap of piece " + std::to_string(i) + " (" +
                          std::to_string(chunks[i].bytes) + " bytes)");
      break;
    }
    mapped += chunks[i].bytes;
  }
  if (s.ok()) s = AllowReadWrite(*d, device, base, total);
  if (!s.ok()) {
    if (mapped > 0) (void)d->Unmap(base, mapped);
    (void)d->AddressFree(base, total);
    return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  imported_[base] = VmmRange{total, 0};
  return reinterpret_cast<void*>(base);
}

Status CudaDeviceApi::CloseShareable(int device, void* base) {
  KV_RETURN_IF_ERROR(Bound(device, "cuMemUnmap").status());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = imported_.find(reinterpret_cast<uint64_t>(base));
  if (it == imported_.end()) {
    return InvalidArgument("no allocation imported by descriptor at this address");
  }
  Status s = UnmapRange(it->first, it->second, "closing an imported allocation");
  imported_.erase(it);
  return s;
}

StatusOr<void*> CudaDeviceApi::MallocShareable(int device, size_t bytes) {
  KV_ASSIGN_OR_RETURN(const Driver* d, Bound(device, "cuMemCreate"));
  CUmemAllocationProp prop = DeviceProp(device);
  size_t g = 0;
  CUresult r = d->Granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return DriverError(*d, r, "cuMemGetAllocationGranularity");
  const uint64_t size = bytes == 0 ? g : (bytes + g - 1) / g * g;
  CUmemGenericAllocationHandle h = 0;
  r = d->Create(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) return DriverError(*d, r, "cuMemCreate of " + std::to_string(size));
  CUdeviceptr base = 0;
  r = d->Reserve(&base, size, 0, 0, 0);
  if (r == CUDA_SUCCESS) {
    r = d->Map(base, size, 0, h, 0);
    if (r != CUDA_SUCCESS) (void)d->AddressFree(base, size);
  }
  if (r != CUDA_SUCCESS) {
    (void)d->Release(h);
    return DriverError(*d, r, "mapping a new allocation");
  }
  Status s = AllowReadWrite(*d, device, base, size);
  std::lock_guard<std::mutex> lock(mu_);
  if (!s.ok()) {
    (void)UnmapRange(base, VmmRange{size, h}, "MallocShareable");
    return s;
  }
  owned_[base] = VmmRange{size, h};
  return reinterpret_cast<void*>(base);
}

StatusOr<ShareableExport> CudaDeviceApi::ExportShareable(void* ptr) {
  const Driver& d = GetDriver();
  KV_RETURN_IF_ERROR(d.loaded);
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = d.AddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) return DriverError(d, r, "cuMemGetAddressRange");
  CUmemGenericAllocationHandle h = 0;
  r = d.Retain(&h, ptr);
  if (r != CUDA_SUCCESS) return DriverError(d, r, "cuMemRetainAllocationHandle");
  int fd = -1;
  r = d.Export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  (void)d.Release(h);
  if (r != CUDA_SUCCESS) {
    return DriverError(d, r,
                       "cuMemExportToShareableHandle (the allocation must be made with the "
                       "POSIX file descriptor handle type)");
  }
  ShareableExport e;
  e.fd = Fd(fd);
  e.base = base;
  e.bytes = size;
  return e;
}

}  // namespace korovod
