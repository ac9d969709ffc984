#include "sidecar/daemon/device_handle_cache.h"

#include <cstring>

#include "common/log.h"

namespace korovod::sidecar {

DeviceHandleCache::~DeviceHandleCache() {
  for (auto& [key, e] : entries_) {
    Status s = api_.CloseMemHandle(key.first, e.base);
    if (!s.ok()) KV_LOG(kWarning, kArena, "closing a device allocation: %s", s.ToString().c_str());
  }
}

StatusOr<std::byte*> DeviceHandleCache::Resolve(int device, const DeviceBufferRecord& buffer,
                                                const std::string& tensor) {
  IpcMemHandle handle;
  std::memcpy(handle.data(), buffer.mem_handle, handle.size());
  const auto key = std::make_pair(device, buffer.allocation_base);
  auto it = entries_.find(key);
  if (it != entries_.end() &&
      (it->second.handle != handle || it->second.bytes != buffer.allocation_bytes)) {
    // The trainer freed that allocation and got a new one at the same address.
    Status s = api_.CloseMemHandle(device, it->second.base);
    if (!s.ok())
      KV_LOG(kWarning, kArena, "closing a replaced device allocation: %s", s.ToString().c_str());
    entries_.erase(it);
    it = entries_.end();
    ++replaced_;
  }
  if (it == entries_.end()) {
    auto base = api_.OpenMemHandle(device, handle);
    if (!base.ok()) {
      return base.status().WithContext("tensor \"" + tensor +
                                       "\": opening its device allocation (" +
                                       std::to_string(buffer.allocation_bytes) +
                                       " bytes on device " + std::to_string(device) + ")");
    }
    it = entries_.emplace(key, Entry{handle, buffer.allocation_bytes, *base}).first;
    ++opened_;
  }
  return static_cast<std::byte*>(it->second.base) + buffer.offset;
}

}  // namespace korovod::sidecar
