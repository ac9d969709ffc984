// DeviceExecutor: runs planned collectives whose tensors live in device memory (OpRequest::device
// >= 0) through the engine's DeviceBackend: one DeviceCollectives per process set, made on the
// set's first device collective (collective: every member runs that collective at the same point),
// one device stream, and a grow-only device fusion buffer that fused allreduces are copied into
// and out of on the stream, as Horovod's NCCL path does. Runs on the engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "runtime/core/op_executor.h"
#include "runtime/device/device_collectives.h"

namespace korovod {

class DeviceExecutor {
 public:
  DeviceExecutor(Communicator& comm, DeviceBackend backend) : comm_(comm), backend_(backend) {}
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  void set_timeline(Timeline* timeline) { timeline_ = timeline; }
  // The device this rank drives (the first device tensor's); -1 before any.
  int device() const { return device_; }
  // Device fusion buffer bytes allocated (grows to the largest fused allreduce).
  uint64_t fusion_capacity() const { return fusion_capacity_; }
  int collectives_made() const { return collectives_made_; }

  // Like OpExecutor::Run for device ops (allreduce, fused or not; broadcast, allgather,
  // reducescatter and alltoall, one tensor each). `set_id` keys
  // the set's collectives. A non-OK return is a data-plane failure.
  Status Run(int set_id, const ProcessSet& set, std::vector<OpExecutor::Item>& items,
             uint64_t* bytes);
  // The set is gone: its collectives (an NCCL communicator) are released.
  void ForgetSet(int set_id) { collectives_.erase(set_id); }

 private:
  StatusOr<DeviceCollectives*> CollectivesFor(int set_id, const ProcessSet& set, int device);
  Status Allreduce(DeviceCollectives& c, std::vector<OpExecutor::Item>& items, uint64_t* bytes);
  Status Broadcast(DeviceCollectives& c, OpExecutor::Item& it, uint64_t* bytes);
  Status Allgather(DeviceCollectives& c, const ProcessSet& set, OpExecutor::Item& it,
                   uint64_t* bytes);
  Status ReduceScatter(DeviceCollectives& c, const ProcessSet& set, OpExecutor::Item& it,
                       uint64_t* bytes);
  Status Alltoall(DeviceCollectives& c, const ProcessSet& set, OpExecutor::Item& it,
                  uint64_t* bytes);
  // The op's device output of `shape`: its allocator's (or its output); on failure scratch, with
  // the op's status set, so that the collective still runs (the other ranks are in it).
  StatusOr<void*> DeviceOutput(OpExecutor::Item& it, const TensorShape& shape, size_t bytes);
  StatusOr<std::byte*> FusionBuffer(size_t bytes);
  Status Drain(const std::string& what);
  void Start(std::vector<OpExecutor::Item>& items, const char* activity);
  void End(std::vector<OpExecutor::Item>& items);
  // One tensor's collective, recorded as NCCL_<op> (DEVICE_<op> on host memory) on the timeline.
  Status One(OpExecutor::Item& it, const std::string& op,
             const std::function<Status()>& collective);

  Communicator& comm_;
  DeviceBackend backend_;
  Timeline* timeline_ = nullptr;
  int device_ = -1;
  DeviceStream stream_ = nullptr;
  std::byte* fusion_ = nullptr;
  uint64_t fusion_capacity_ = 0;
  int collectives_made_ = 0;
  std::map<int, std::unique_ptr<DeviceCollectives>> collectives_;  // by set id
};

}  // namespace korovod
