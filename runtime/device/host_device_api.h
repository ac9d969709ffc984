// HostDeviceApi: DeviceApi over host memory, for machines without a GPU. Each "device" allocation
// is a POSIX shared-memory object (so another process can import it by handle, as with
// cudaIpcOpenMemHandle), each stream a worker thread that runs what is enqueued in order, each
// interprocess event a shared page whose state the recording stream sets. The contract mirrors
// CUDA's where tests rely on it: a handle opens once per process (a second open is refused, as
// CUDA refuses it), a freed allocation cannot be opened, an event is ready only once the work
// enqueued before its record has run. Allocations made with MallocShareable are memfds instead:
// they have no IPC handle (ExportMemHandle refuses them, as cudaIpcGetMemHandle refuses cuMemCreate
// memory) and cross as file descriptors (host_device_shareable.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/shared_memory.h"
#include "runtime/device/device_api.h"

namespace korovod {

class HostDeviceApi final : public DeviceApi {
 public:
  // `devices` virtual devices with fixed UUIDs (the same in every process, so a trainer and a
  // sidecar agree on them); shared-memory names start with `prefix` ("/" then a few characters).
  explicit HostDeviceApi(int devices = 2, std::string prefix = "/kvhostdev-");
  ~HostDeviceApi() override;

  std::string_view name() const override { return "host"; }
  int DeviceCount() override { return devices_; }
  StatusOr<int> DeviceOf(const DeviceUuid& uuid) override;
  StatusOr<DeviceUuid> UuidOf(int device) override;

  StatusOr<void*> OpenMemHandle(int device, const IpcMemHandle& handle) override;
  Status CloseMemHandle(int device, void* base) override;
  StatusOr<void*> ImportShareable(int device, std::span<const ShareableChunk> chunks) override;
  Status CloseShareable(int device, void* base) override;
  StatusOr<DeviceEvent> OpenEventHandle(int device, const IpcEventHandle& handle) override;
  Status QueryEvent(DeviceEvent event) override;
  void DestroyEvent(DeviceEvent event) override;

  StatusOr<void*> Malloc(int device, size_t bytes) override;
  void Free(int device, void* ptr) override;
  StatusOr<DeviceStream> CreateStream(int device) override;
  void DestroyStream(DeviceStream stream) override;
  Status CopyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) override;
  Status QueryStream(DeviceStream stream) override;

  StatusOr<IpcMemHandle> ExportMemHandle(void* base) override;
  StatusOr<void*> MallocShareable(int device, size_t bytes) override;
  StatusOr<ShareableExport> ExportShareable(void* ptr) override;
  StatusOr<IpcEventHandle> RecordIpcEvent(int device, DeviceStream stream,
                                          DeviceEvent* event) override;

  // Host only: runs `work` on `stream` after what is already enqueued (a test's "kernel").
  Status Enqueue(DeviceStream stream, std::function<void()> work);
  // Allocations imported (by handle or by descriptor) and not yet closed (what a handle cache
  // holds open).
  int open_imports() const;
  // The size of every piece MallocShareable makes is a multiple of this (CUDA's granularity).
  static size_t ShareableGranularity();

 private:
  class Stream;
  struct Allocation {
    int device;
    ShmSegment segment;
    ShmMapping mapping;
  };
  struct Import {
    int device;
    std::string name;
    ShmMapping mapping;
  };
  struct Event;
  // A range of this process's address space mapped with mmap: unmapped when it goes.
  class Mapped {
   public:
    Mapped(std::byte* base, size_t bytes) : base_(base), bytes_(bytes) {}
    ~Mapped();
    Mapped(Mapped&& o) noexcept;
    Mapped(const Mapped&) = delete;
    Mapped& operator=(const Mapped&) = delete;
    Mapped& operator=(Mapped&&) = delete;
    std::byte* base() const { return base_; }
    size_t bytes() const { return bytes_; }

   private:
    std::byte* base_;
    size_t bytes_;
  };
  struct ShareableAllocation {
    int device;
    Fd memfd;
    Mapped mapping;
  };

  Status CheckDevice(int device) const;
  template <typename T>
  T* Find(const std::map<T*, std::unique_ptr<T>>& objects, void* p) const;
  Stream* FindStream(void* p) const;
  Event* FindEvent(void* p) const;
  Event* KeepEvent(std::unique_ptr<Event> ev);

  const int devices_;
  const std::string prefix_;
  mutable std::mutex mu_;
  uint64_t next_id_ = 0;
  std::map<const std::byte*, Allocation> allocations_;         // by base
  std::map<const std::byte*, Import> imports_;                 // by base in this process
  std::map<const std::byte*, ShareableAllocation> shareable_;  // by base
  std::map<const std::byte*, Mapped> shareable_imports_;       // by base in this process
  std::map<Event*, std::unique_ptr<Event>> events_;
  std::map<Stream*, std::unique_ptr<Stream>> streams_;  // last: destroyed (joined) first
};

}  // namespace korovod
