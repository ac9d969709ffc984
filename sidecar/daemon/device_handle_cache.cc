#include "sidecar/daemon/device_handle_cache.h"

#include <cstring>

#include "common/log.h"

namespace korovod::sidecar {

DeviceHandleCache::~DeviceHandleCache() {
  for (auto& [key, e] : entries_) Close(key.first, e, "closing a device allocation");
}

void DeviceHandleCache::Close(int device, const Entry& e, const char* what) {
  Status s = e.kind == kDeviceHandleExported ? api_.CloseShareable(device, e.base)
                                             : api_.CloseMemHandle(device, e.base);
  if (!s.ok()) KV_LOG(kWarning, kArena, "%s: %s", what, s.ToString().c_str());
}

StatusOr<void*> DeviceHandleCache::Open(int device, const DeviceBufferRecord& buffer,
                                        const IpcMemHandle& handle) {
  if (buffer.handle_kind != kDeviceHandleExported) return api_.OpenMemHandle(device, handle);
  uint64_t id = 0;
  std::memcpy(&id, buffer.mem_handle, sizeof id);
  if (inbox_ == nullptr) {
    return FailedPrecondition("export id " + std::to_string(id) +
                              ": this sidecar has no memory channel for memory without an IPC "
                              "handle");
  }
  KV_ASSIGN_OR_RETURN(MemoryInbox::Export x, inbox_->Take(id));
  uint64_t total = 0;
  std::vector<ShareableChunk> chunks;
  for (size_t i = 0; i < x.fds.size(); ++i) {
    chunks.push_back(ShareableChunk{x.fds[i].get(), x.piece_bytes[i]});
    total += x.piece_bytes[i];
  }
  if (total != buffer.allocation_bytes) {
    return InvalidArgument("export id " + std::to_string(id) + " has pieces of " +
                           std::to_string(total) + " bytes in all, the tensor's allocation " +
                           std::to_string(buffer.allocation_bytes));
  }
  return api_.ImportShareable(device, chunks);  // the descriptors close when `x` goes
}

StatusOr<std::byte*> DeviceHandleCache::Resolve(int device, const DeviceBufferRecord& buffer,
                                                const std::string& tensor) {
  IpcMemHandle handle;
  std::memcpy(handle.data(), buffer.mem_handle, handle.size());
  const auto key = std::make_pair(device, buffer.allocation_base);
  auto it = entries_.find(key);
  if (it != entries_.end() &&
      (it->second.kind != buffer.handle_kind || it->second.handle != handle ||
       it->second.bytes != buffer.allocation_bytes)) {
    // The trainer freed that allocation and got a new one at the same address.
    Close(device, it->second, "closing a replaced device allocation");
    entries_.erase(it);
    it = entries_.end();
    ++replaced_;
  }
  if (it == entries_.end()) {
    auto base = Open(device, buffer, handle);
    if (!base.ok()) {
      return base.status().WithContext("tensor \"" + tensor +
                                       "\": opening its device allocation (" +
                                       std::to_string(buffer.allocation_bytes) +
                                       " bytes on device " + std::to_string(device) + ")");
    }
    it = entries_.emplace(key, Entry{buffer.handle_kind, handle, buffer.allocation_bytes, *base})
             .first;
    ++opened_;
  }
  return static_cast<std::byte*>(it->second.base) + buffer.offset;
}

}  // namespace korovod::sidecar
