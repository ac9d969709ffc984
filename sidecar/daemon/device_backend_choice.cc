#include "sidecar/daemon/device_backend_choice.h"

#include "common/env_names.h"
#include "runtime/device/host_device_api.h"
#include "runtime/device/host_device_collectives.h"
#ifdef KOROVOD_WITH_NCCL_BACKEND
#include "runtime/device/cuda_device_api.h"
#include "runtime/nccl/nccl_device_collectives.h"
#endif

namespace korovod::sidecar {

bool NcclBackendBuilt() {
#ifdef KOROVOD_WITH_NCCL_BACKEND
  return true;
#else
  return false;
#endif
}

StatusOr<SidecarDevice> ChooseDeviceBackend(const std::string& setting,
                                            const std::string& shm_prefix) {
  SidecarDevice d;
  const std::string name = std::string(env::kDeviceBackend) + "=" + setting;
  if (setting == "none") {
    d.description = "none (" + name + ")";
    return d;
  }
  if (setting == "host") {
    constexpr int kHostDevices = 8;
    auto api = std::make_unique<HostDeviceApi>(kHostDevices, shm_prefix + "dev-");
    d.backend = {api.get(), HostDeviceCollectives::Factory(api.get())};
    d.api = std::move(api);
    d.kind = "host";
    d.description = "host (" + std::to_string(kHostDevices) + " host-memory devices, " + name + ")";
    return d;
  }
#ifdef KOROVOD_WITH_NCCL_BACKEND
  auto cuda = std::make_unique<CudaDeviceApi>();
  const int devices = cuda->DeviceCount();
  if (devices > 0) {
    d.backend = {cuda.get(), NcclDeviceCollectives::Factory()};
    d.api = std::move(cuda);
    d.kind = "nccl";
    d.nccl_version = NcclVersion();
    d.description = "nccl " + std::to_string(d.nccl_version) + " (" + std::to_string(devices) +
                    " CUDA device" + (devices == 1 ? "" : "s") + ")";
    return d;
  }
  if (setting == "nccl") {
    return FailedPrecondition(name +
                              ": no CUDA device is visible to the sidecar (no driver, or "
                              "the pod does not share the trainer's GPUs: docs/adr/0012)");
  }
  d.description = "none (no CUDA device visible)";
#else
  if (setting == "nccl") {
    return FailedPrecondition(name +
                              ": this korovod-sidecar was built without CUDA and NCCL "
                              "(the CUDA image has them)");
  }
  d.description = "none (built without CUDA and NCCL)";
#endif
  return d;
}

}  // namespace korovod::sidecar
