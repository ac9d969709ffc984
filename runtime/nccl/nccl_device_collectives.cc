#include "runtime/nccl/nccl_device_collectives.h"

namespace korovod {

DeviceCollectivesFactory NcclDeviceCollectives::Factory() {
  return [](Communicator& cpu, const ProcessSet* set,
            int device) -> StatusOr<std::unique_ptr<DeviceCollectives>> {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                        NcclCommunicator::Create(cpu, device, set));
    return std::unique_ptr<DeviceCollectives>(
        std::make_unique<NcclDeviceCollectives>(std::move(comm)));
  };
}

namespace {
// The communicator is the set's own: options go to it without the set.
template <typename Options>
Options OwnSet(Options o) {
  o.set = nullptr;
  return o;
}
cudaStream_t Cuda(DeviceStream s) { return static_cast<cudaStream_t>(s); }
}  // namespace

Status NcclDeviceCollectives::Allreduce(const AllreduceOptions& o, DeviceStream stream) {
  return comm_->Allreduce(OwnSet(o), Cuda(stream));
}
Status NcclDeviceCollectives::Broadcast(const BroadcastOptions& o, DeviceStream stream) {
  return comm_->Broadcast(OwnSet(o), Cuda(stream));
}
Status NcclDeviceCollectives::Allgather(const AllgatherOptions& o, DeviceStream stream) {
  return comm_->Allgather(OwnSet(o), Cuda(stream));
}
Status NcclDeviceCollectives::ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) {
  return comm_->ReduceScatter(OwnSet(o), Cuda(stream));
}
Status NcclDeviceCollectives::Alltoall(const AlltoallOptions& o, DeviceStream stream) {
  return comm_->Alltoall(OwnSet(o), Cuda(stream));
}

}  // namespace korovod
