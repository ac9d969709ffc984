// NcclDeviceCollectives: DeviceCollectives over one NcclCommunicator, made per process set by
// Factory() (the unique id exchanged over the set's CPU connections, which the job key
// authenticates). The engine's device path on a GPU host.
#pragma once

#include <memory>

#include "runtime/device/device_collectives.h"
#include "runtime/nccl/nccl_communicator.h"

namespace korovod {

class NcclDeviceCollectives final : public DeviceCollectives {
 public:
  static DeviceCollectivesFactory Factory();

  explicit NcclDeviceCollectives(std::unique_ptr<NcclCommunicator> comm) : comm_(std::move(comm)) {}
  int device() const override { return comm_->device(); }
  Status Allreduce(const AllreduceOptions& o, DeviceStream stream) override;
  Status Broadcast(const BroadcastOptions& o, DeviceStream stream) override;
  Status Allgather(const AllgatherOptions& o, DeviceStream stream) override;
  Status ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) override;
  Status Alltoall(const AlltoallOptions& o, DeviceStream stream) override;

 private:
  std::unique_ptr<NcclCommunicator> comm_;
};

}  // namespace korovod
