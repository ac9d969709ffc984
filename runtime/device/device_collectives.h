// DeviceCollectives: the collectives of one process set on device buffers, ordered on a device
// stream. The engine fuses device tensors and runs them through this interface; it never knows
// the backend. Implementations: NcclDeviceCollectives (runtime/nccl, one NCCL communicator per
// process set) and HostDeviceCollectives (the CPU collectives on HostDeviceApi memory).
#pragma once

#include <functional>
#include <memory>

#include "common/status.h"
#include "runtime/collectives/collectives.h"
#include "runtime/device/device_api.h"
#include "runtime/world/communicator.h"
#include "runtime/world/process_set.h"

namespace korovod {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual int device() const = 0;
  // Each runs after everything already enqueued on `stream` and returns once complete. Options'
  // `set` is ignored: an object serves the set it was made for. A failure is a data-plane failure
  // (the object is broken, later calls fail with the same cause).
  virtual Status Allreduce(const AllreduceOptions& o, DeviceStream stream) = 0;
  virtual Status Broadcast(const BroadcastOptions& o, DeviceStream stream) = 0;
  virtual Status Allgather(const AllgatherOptions& o, DeviceStream stream) = 0;
  virtual Status ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) = 0;
  virtual Status Alltoall(const AlltoallOptions& o, DeviceStream stream) = 0;
};

// Makes the collectives of `set` (null: the world) for this rank's `device`. Collective: every
// member calls it at the same point of its op sequence; errors name the rank that cannot join.
using DeviceCollectivesFactory = std::function<StatusOr<std::unique_ptr<DeviceCollectives>>(
    Communicator& comm, const ProcessSet* set, int device)>;

// What the engine needs to run ops on device tensors: the device runtime and the collectives.
struct DeviceBackend {
  DeviceApi* api = nullptr;  // not owned; outlives the engine
  DeviceCollectivesFactory collectives;
  bool enabled() const { return api != nullptr && collectives != nullptr; }
};

}  // namespace korovod
