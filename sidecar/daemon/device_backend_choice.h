// The sidecar's device backend, from KOROVOD_DEVICE_BACKEND: what runs ops on the trainer's
// device (GPU) tensors. One per process, shared by the ranks it serves.
//   auto  NCCL on the CUDA runtime where this build has them and a GPU is visible; else none
//   nccl  the same, and an error when it cannot be had
//   host  host memory standing in for GPUs (HostDeviceApi): the device protocol on CPU-only
//         machines, for tests
//   none  device tensors are refused with an error naming this setting
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/device/device_collectives.h"

namespace korovod::sidecar {

struct SidecarDevice {
  std::unique_ptr<DeviceApi> api;  // null for none
  DeviceBackend backend;           // {api.get(), collectives}; disabled for none
  std::string description;         // for the start-up log: "nccl (2 CUDA devices)", ...
  std::string kind = "none";       // "nccl", "host" or "none"
  int nccl_version = 0;            // NCCL's version code with "nccl"
};

// `shm_prefix`: the job's shared-memory prefix (the host backend's allocations live under it).
StatusOr<SidecarDevice> ChooseDeviceBackend(const std::string& setting,
                                            const std::string& shm_prefix);

// Whether this build has the NCCL backend (CUDA runtime + NCCL found at configure time).
bool NcclBackendBuilt();

}  // namespace korovod::sidecar
