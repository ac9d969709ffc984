#include "runtime/device/host_device_collectives.h"

namespace korovod {

DeviceCollectivesFactory HostDeviceCollectives::Factory(DeviceApi* api) {
  return [api](Communicator& comm, const ProcessSet* set,
               int device) -> StatusOr<std::unique_ptr<DeviceCollectives>> {
    if (device < 0 || device >= api->DeviceCount()) {
      return FailedPrecondition("rank " + std::to_string(comm.rank()) + ": device " +
                                std::to_string(device) + " out of range");
    }
    return std::unique_ptr<DeviceCollectives>(
        std::make_unique<HostDeviceCollectives>(api, comm, set, device));
  };
}

HostDeviceCollectives::HostDeviceCollectives(DeviceApi* api, Communicator& comm,
                                             const ProcessSet* set, int device)
    : api_(api), comm_(comm), set_(set), device_(device) {}

Status HostDeviceCollectives::Drain(DeviceStream stream, const char* what) {
  if (!broken_.ok()) return broken_;
  Status s = PollUntilReady([&] { return api_->QueryStream(stream); },
                            Deadline::After(comm_.options().op_timeout),
                            std::string("host device ") + what + ": stream");
  if (!s.ok()) broken_ = s;
  return s;
}

Status HostDeviceCollectives::Allreduce(const AllreduceOptions& o, DeviceStream stream) {
  KV_RETURN_IF_ERROR(Drain(stream, "allreduce"));
  AllreduceOptions on_set = o;
  on_set.set = set_;
  Status s = ::korovod::Allreduce(comm_, on_set);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) broken_ = s;
  return s;
}

Status HostDeviceCollectives::Broadcast(const BroadcastOptions& o, DeviceStream stream) {
  KV_RETURN_IF_ERROR(Drain(stream, "broadcast"));
  BroadcastOptions on_set = o;
  on_set.set = set_;
  Status s = ::korovod::Broadcast(comm_, on_set);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) broken_ = s;
  return s;
}

Status HostDeviceCollectives::Allgather(const AllgatherOptions& o, DeviceStream stream) {
  KV_RETURN_IF_ERROR(Drain(stream, "allgather"));
  AllgatherOptions on_set = o;
  on_set.set = set_;
  Status s = ::korovod::Allgather(comm_, on_set);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) broken_ = s;
  return s;
}

Status HostDeviceCollectives::ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) {
  KV_RETURN_IF_ERROR(Drain(stream, "reducescatter"));
  ReduceScatterOptions on_set = o;
  on_set.set = set_;
  Status s = ::korovod::ReduceScatter(comm_, on_set);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) broken_ = s;
  return s;
}

Status HostDeviceCollectives::Alltoall(const AlltoallOptions& o, DeviceStream stream) {
  KV_RETURN_IF_ERROR(Drain(stream, "alltoall"));
  AlltoallOptions on_set = o;
  on_set.set = set_;
  Status s = ::korovod::Alltoall(comm_, on_set);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) broken_ = s;
  return s;
}

}  // namespace korovod
