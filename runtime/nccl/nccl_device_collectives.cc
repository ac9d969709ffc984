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

// The communicator is the set's own: options go to it without the set.
Status NcclDeviceCollectives::Allreduce(const AllreduceOptions& o, DeviceStream stream) {
  AllreduceOptions own = o;
  own.set = nullptr;
  return comm_->Allreduce(own, static_cast<cudaStream_t>(stream));
}

Status NcclDeviceCollectives::Broadcast(const BroadcastOptions& o, DeviceStream stream) {
  BroadcastOptions own = o;
  own.set = nullptr;
  return comm_->Broadcast(own, static_cast<cudaStream_t>(stream));
}

Status NcclDeviceCollectives::Allgather(const AllgatherOptions& o, DeviceStream stream) {
  AllgatherOptions own = o;
  own.set = nullptr;
  return comm_->Allgather(own, static_cast<cudaStream_t>(stream));
}

Status NcclDeviceCollectives::ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) {
  ReduceScatterOptions own = o;
  own.set = nullptr;
  return comm_->ReduceScatter(own, static_cast<cudaStream_t>(stream));
}

Status NcclDeviceCollectives::Alltoall(const AlltoallOptions& o, DeviceStream stream) {
  AlltoallOptions own = o;
  own.set = nullptr;
  return comm_->Alltoall(own, static_cast<cudaStream_t>(stream));
}

}  // namespace korovod
