// HostDeviceCollectives: DeviceCollectives over HostDeviceApi memory (host memory standing in for
// a GPU's): waits for the stream, then runs the CPU collectives of runtime/collectives on the
// buffers. With it the engine's device path (fusion in a device buffer, copies on a stream,
// process sets, errors) runs on machines without a GPU, through the same interface NCCL serves.
#pragma once

#include "runtime/device/device_collectives.h"

namespace korovod {

class HostDeviceCollectives final : public DeviceCollectives {
 public:
  // A DeviceCollectivesFactory for `api` (which must be a HostDeviceApi's).
  static DeviceCollectivesFactory Factory(DeviceApi* api);

  HostDeviceCollectives(DeviceApi* api, Communicator& comm, const ProcessSet* set, int device);
  int device() const override { return device_; }
  Status Allreduce(const AllreduceOptions& o, DeviceStream stream) override;
  Status Broadcast(const BroadcastOptions& o, DeviceStream stream) override;
  Status Allgather(const AllgatherOptions& o, DeviceStream stream) override;
  Status ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) override;
  Status Alltoall(const AlltoallOptions& o, DeviceStream stream) override;

 private:
  Status Drain(DeviceStream stream, const char* what);
  template <typename Options, typename Collective>
  Status Run(const char* what, const Options& o, DeviceStream stream, Collective collective);

  DeviceApi* api_;
  Communicator& comm_;
  const ProcessSet* set_;
  int device_;
  Status broken_;
};

}  // namespace korovod
