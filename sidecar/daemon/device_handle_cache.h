// DeviceHandleCache: the trainer's device allocations this sidecar has mapped (CUDA IPC), one
// session's worth. An allocation is opened on its first tensor and stays open for the next ones
// (opening costs far more than a collective's launch, and a handle opens only once per process);
// a base address that arrives with a different handle is a new allocation at a reused address, and
// the old mapping is closed first. Everything still open is closed when the cache goes, which the
// op loop arranges to be after the session's last op completed: the sidecar never touches an
// allocation after its client is gone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/status.h"
#include "runtime/device/device_api.h"
#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar {

class DeviceHandleCache {
 public:
  explicit DeviceHandleCache(DeviceApi& api) : api_(api) {}
  ~DeviceHandleCache();
  DeviceHandleCache(const DeviceHandleCache&) = delete;
  DeviceHandleCache& operator=(const DeviceHandleCache&) = delete;

  // The tensor's address in this process (the allocation's mapping + offset); `tensor` names it in
  // errors. Single-threaded (the op loop).
  StatusOr<std::byte*> Resolve(int device, const DeviceBufferRecord& buffer,
                               const std::string& tensor);

  size_t open() const { return entries_.size(); }
  uint64_t opened() const { return opened_; }      // handles opened in all
  uint64_t replaced() const { return replaced_; }  // closed because their base was reused

 private:
  struct Entry {
    IpcMemHandle handle;
    uint64_t bytes;
    void* base;  // in this process
  };
  DeviceApi& api_;
  std::map<std::pair<int, uint64_t>, Entry> entries_;  // by (device, trainer's base)
  uint64_t opened_ = 0;
  uint64_t replaced_ = 0;
};

}  // namespace korovod::sidecar
