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

// Waits for the stream, then runs the CPU collective on the set; an invalid argument leaves the
// object usable, any other failure breaks it.
template <typename Options, typename Collective>
Status HostDeviceCollectives::Run(const char* what, const Options& o, DeviceStream stream,
                                  Collective collective) {
  KV_RETURN_IF_ERROR(Drain(stream, what));
  Options on_set = o;
  on_set.set = set_;
  Status s = collective(comm_, on_set);
  if (!s.ok() && s.code() != StatusCode::kInvalidArgument) broken_ = s;
  return s;
}

Status HostDeviceCollectives::Allreduce(const AllreduceOptions& o, DeviceStream stream) {
  return Run("allreduce", o, stream, &::korovod::Allreduce);
}
Status HostDeviceCollectives::Broadcast(const BroadcastOptions& o, DeviceStream stream) {
  return Run("broadcast", o, stream, &::korovod::Broadcast);
}
Status HostDeviceCollectives::Allgather(const AllgatherOptions& o, DeviceStream stream) {
  return Run("allgather", o, stream, &::korovod::Allgather);
}
Status HostDeviceCollectives::ReduceScatter(const ReduceScatterOptions& o, DeviceStream stream) {
  return Run("reducescatter", o, stream, &::korovod::ReduceScatter);
}
Status HostDeviceCollectives::Alltoall(const AlltoallOptions& o, DeviceStream stream) {
  return Run("alltoall", o, stream, &::korovod::Alltoall);
}

}  // namespace korovod
