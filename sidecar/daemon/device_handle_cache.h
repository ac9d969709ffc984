// DeviceHandleCache: the trainer's device allocations this sidecar has mapped (CUDA IPC), one
// session's worth. An allocation is opened on its first tensor and stays open for the next ones
// (opening costs far more than a collective's launch, and a handle opens only once per process);
// a base address that arrives with a different handle is a new allocation at a reused address, and
// the old mapping is closed first. Everything still open is closed when the cache goes, which the
// op loop arranges to be after the session's last op completed: the sidecar never touches an
// allocation after its client is gone. Memory without a legacy IPC handle arrives as file
// descriptors under an export id (kDeviceHandleExported): the first tensor of such an allocation
// takes them from the session's MemoryInbox and imports them (ImportShareable), then closes them;
// the id plays the handle's part in "same allocation or a new one at a reused address".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "common/status.h"
#include "runtime/device/device_api.h"
#include "sidecar/arena/arena_layout.h"
#include "sidecar/daemon/memory_inbox.h"

namespace korovod::sidecar {

class DeviceHandleCache {
 public:
  // `inbox` (may be null: exported allocations are refused) must outlive the cache.
  explicit DeviceHandleCache(DeviceApi& api, MemoryInbox* inbox = nullptr)
      : api_(api), inbox_(inbox) {}
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
    uint32_t kind;  // kDeviceHandle*
    IpcMemHandle handle;
    uint64_t bytes;
    void* base;  // in this process
  };
  StatusOr<void*> Open(int device, const DeviceBufferRecord& buffer, const IpcMemHandle& handle);
  void Close(int device, const Entry& e, const char* what);
  DeviceApi& api_;
  MemoryInbox* inbox_;
  std::map<std::pair<int, uint64_t>, Entry> entries_;  // by (device, trainer's base)
  uint64_t opened_ = 0;
  uint64_t replaced_ = 0;
};

}  // namespace korovod::sidecar
