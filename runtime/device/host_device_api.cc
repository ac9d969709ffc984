#include "runtime/device/host_device_api.h"

#include <unistd.h>

#include <cstring>
#include <utility>

namespace korovod {
namespace {

constexpr char kMemMagic[4] = {'K', 'V', 'H', 'M'};
constexpr char kEventMagic[4] = {'K', 'V', 'H', 'E'};
constexpr size_t kNameAt = 16;
constexpr size_t kMaxName = kIpcHandleBytes - kNameAt - 1;

// magic, device, size, name: the whole identity of a host allocation or event.
std::array<std::byte, kIpcHandleBytes> Pack(const char (&magic)[4], int device, uint64_t bytes,
                                            const std::string& name) {
  std::array<std::byte, kIpcHandleBytes> h{};
  std::memcpy(h.data(), magic, 4);
  const auto dev = static_cast<uint32_t>(device);
  std::memcpy(h.data() + 4, &dev, 4);
  std::memcpy(h.data() + 8, &bytes, 8);
  std::memcpy(h.data() + kNameAt, name.data(), std::min(name.size(), kMaxName));
  return h;
}

struct Unpacked {
  int device;
  uint64_t bytes;
  std::string name;
};

StatusOr<Unpacked> Unpack(const char (&magic)[4], const std::array<std::byte, kIpcHandleBytes>& h,
                          const char* what) {
  if (std::memcmp(h.data(), magic, 4) != 0) {
    return InvalidArgument(std::string("not a host-device ") + what + " handle");
  }
  Unpacked u;
  uint32_t dev = 0;
  std::memcpy(&dev, h.data() + 4, 4);
  std::memcpy(&u.bytes, h.data() + 8, 8);
  u.device = static_cast<int>(dev);
  const char* name = reinterpret_cast<const char*>(h.data() + kNameAt);
  u.name.assign(name, strnlen(name, kMaxName));
  if (u.name.size() < 2 || u.name[0] != '/') {
    return InvalidArgument(std::string("corrupt host-device ") + what + " handle");
  }
  return u;
}

}  // namespace

// An ordered queue of host work, run by its own thread: a CUDA stream's semantics.
class HostDeviceApi::Stream {
 public:
  Stream() : thread_([this](std::stop_token st) { Loop(st); }) {}
  ~Stream() {
    thread_.request_stop();
    work_.notify_all();
  }
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      ++posted_;
    }
    work_.notify_one();
  }
  bool Idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ == posted_;
  }

 private:
  void Loop(std::stop_token st) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, st, [this] { return !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopped with nothing left
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      ++done_;
    }
  }

  std::mutex mu_;
  std::condition_variable_any work_;
  std::deque<std::function<void()>> tasks_;
  uint64_t posted_ = 0;
  uint64_t done_ = 0;
  std::jthread thread_;  // last: joined before the members it uses go
};

// A shared page holding one word: 0 recorded and pending, 1 complete.
struct HostDeviceApi::Event {
  ShmSegment segment;  // the exporter's: owns the name
  // Shared with a pending record on a stream, which may run after the event is destroyed.
  std::shared_ptr<ShmMapping> mapping;
  std::atomic<uint32_t>* state() const {
    return reinterpret_cast<std::atomic<uint32_t>*>(mapping->data());
  }
};

template <typename T>
T* HostDeviceApi::Find(const std::map<T*, std::unique_ptr<T>>& objects, void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects.find(static_cast<T*>(p));
  return it == objects.end() ? nullptr : it->first;
}

HostDeviceApi::Stream* HostDeviceApi::FindStream(void* p) const { return Find(streams_, p); }
HostDeviceApi::Event* HostDeviceApi::FindEvent(void* p) const { return Find(events_, p); }

HostDeviceApi::HostDeviceApi(int devices, std::string prefix)
    : devices_(devices), prefix_(std::move(prefix)) {}

HostDeviceApi::~HostDeviceApi() = default;

Status HostDeviceApi::CheckDevice(int device) const {
  if (device < 0 || device >= devices_) {
    return InvalidArgument("device " + std::to_string(device) + " out of range, " +
                           std::to_string(devices_) + " visible");
  }
  return OkStatus();
}

StatusOr<DeviceUuid> HostDeviceApi::UuidOf(int device) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  DeviceUuid u{};
  std::memcpy(u.data(), "kvhostdevice", 12);
  u[15] = static_cast<uint8_t>(device);
  return u;
}

StatusOr<int> HostDeviceApi::DeviceOf(const DeviceUuid& uuid) {
  for (int d = 0; d < devices_; ++d) {
    if (*UuidOf(d) == uuid) return d;
  }
  return FailedPrecondition("no visible device has UUID " + UuidString(uuid));
}

StatusOr<void*> HostDeviceApi::Malloc(int device, size_t bytes) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    name = prefix_ + "m" + std::to_string(::getpid()) + "-" + std::to_string(next_id_++);
  }
  const size_t size = bytes == 0 ? 1 : bytes;
  KV_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, size, 0600));
  KV_RETURN_IF_ERROR(seg.Allocate(0, size));
  KV_ASSIGN_OR_RETURN(ShmMapping map, seg.Map(size));
  std::byte* base = map.data();
  std::lock_guard<std::mutex> lock(mu_);
  allocations_.emplace(base, Allocation{device, std::move(seg), std::move(map)});
  return static_cast<void*>(base);
}

void HostDeviceApi::Free(int, void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  allocations_.erase(static_cast<std::byte*>(ptr));  // unmaps and unlinks: no new opens
  // Unmaps and closes the memfd; an importer's mapping keeps the memory, as with cuMemRelease.
  shareable_.erase(static_cast<std::byte*>(ptr));
}

StatusOr<IpcMemHandle> HostDeviceApi::ExportMemHandle(void* ptr) {
  auto* p = static_cast<std::byte*>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.upper_bound(p);
  if (it != allocations_.begin()) {
    --it;
    if (p < it->first + it->second.mapping.size()) {
      return Pack(kMemMagic, it->second.device, it->second.mapping.size(),
                  it->second.segment.name());
    }
  }
  for (const auto& [base, a] : shareable_) {
    if (p >= base && p < base + a.mapping.bytes()) {
      return FailedPrecondition(
          "this device allocation has no IPC handle (it was made to be exported as a file "
          "descriptor, as cuMemCreate memory is)");
    }
  }
  return InvalidArgument("pointer is not in a device allocation of this process");
}

StatusOr<void*> HostDeviceApi::OpenMemHandle(int device, const IpcMemHandle& handle) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  KV_ASSIGN_OR_RETURN(Unpacked u, Unpack(kMemMagic, handle, "memory"));
  if (u.device != device) {
    return InvalidArgument("allocation " + u.name + " is on device " + std::to_string(u.device) +
                           ", not device " + std::to_string(device));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [base, imp] : imports_) {
      if (imp.name == u.name) {
        return FailedPrecondition("allocation " + u.name +
                                  " is already open in this process (a handle opens once)");
      }
    }
  }
  int err = 0;
  auto seg = ShmSegment::Open(u.name, &err);
  if (!seg.ok()) {
    return FailedPrecondition("allocation " + u.name +
                              " cannot be opened (freed by its owner?): " + seg.status().message());
  }
  KV_ASSIGN_OR_RETURN(uint64_t size, seg->Size());
  if (size < u.bytes)
    return InvalidArgument("allocation " + u.name + " is smaller than its handle");
  KV_ASSIGN_OR_RETURN(ShmMapping map, seg->Map(u.bytes));
  std::byte* base = map.data();
  std::lock_guard<std::mutex> lock(mu_);
  imports_.emplace(base, Import{device, u.name, std::move(map)});
  return static_cast<void*>(base);
}

Status HostDeviceApi::CloseMemHandle(int, void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  if (imports_.erase(static_cast<std::byte*>(base)) == 0) {
    return InvalidArgument("no imported allocation at this address");
  }
  return OkStatus();
}

int HostDeviceApi::open_imports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(imports_.size() + shareable_imports_.size());
}

StatusOr<DeviceStream> HostDeviceApi::CreateStream(int device) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  auto stream = std::make_unique<Stream>();
  Stream* raw = stream.get();
  std::lock_guard<std::mutex> lock(mu_);
  streams_.emplace(raw, std::move(stream));
  return static_cast<DeviceStream>(raw);
}

void HostDeviceApi::DestroyStream(DeviceStream stream) {
  std::unique_ptr<Stream> owned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(static_cast<Stream*>(stream));
    if (it == streams_.end()) return;
    owned = std::move(it->second);
    streams_.erase(it);
  }
  // Destroyed outside the lock: the stream finishes its work and joins its thread.
}

Status HostDeviceApi::Enqueue(DeviceStream stream, std::function<void()> work) {
  Stream* s = FindStream(stream);
  if (s == nullptr) return InvalidArgument("unknown stream");
  s->Post(std::move(work));
  return OkStatus();
}

Status HostDeviceApi::CopyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) {
  if (bytes == 0) return OkStatus();
  if (dst == nullptr || src == nullptr) return InvalidArgument("null pointer in a device copy");
  return Enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

Status HostDeviceApi::QueryStream(DeviceStream stream) {
  Stream* s = FindStream(stream);
  if (s == nullptr) return InvalidArgument("unknown stream");
  return s->Idle() ? OkStatus() : NotReady("stream");
}

StatusOr<IpcEventHandle> HostDeviceApi::RecordIpcEvent(int device, DeviceStream stream,
                                                       DeviceEvent* event) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  Stream* s = FindStream(stream);
  if (s == nullptr) return InvalidArgument("unknown stream");
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    name = prefix_ + "e" + std::to_string(::getpid()) + "-" + std::to_string(next_id_++);
  }
  auto ev = std::make_unique<Event>();
  KV_ASSIGN_OR_RETURN(ev->segment, ShmSegment::Create(name, 64, 0600));
  KV_RETURN_IF_ERROR(ev->segment.Allocate(0, 64));
  KV_ASSIGN_OR_RETURN(ShmMapping map, ev->segment.Map(64));
  ev->mapping = std::make_shared<ShmMapping>(std::move(map));
  ev->state()->store(0, std::memory_order_relaxed);
  s->Post([mapping = ev->mapping] {
    reinterpret_cast<std::atomic<uint32_t>*>(mapping->data())->store(1, std::memory_order_release);
  });
  *event = KeepEvent(std::move(ev));
  return Pack(kEventMagic, device, 64, name);
}

StatusOr<DeviceEvent> HostDeviceApi::OpenEventHandle(int device, const IpcEventHandle& handle) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  KV_ASSIGN_OR_RETURN(Unpacked u, Unpack(kEventMagic, handle, "event"));
  auto seg = ShmSegment::Open(u.name);
  if (!seg.ok())
    return FailedPrecondition("event " + u.name + " cannot be opened: " + seg.status().message());
  auto ev = std::make_unique<Event>();
  KV_ASSIGN_OR_RETURN(ShmMapping map, seg->Map(64));
  ev->mapping = std::make_shared<ShmMapping>(std::move(map));
  return static_cast<DeviceEvent>(KeepEvent(std::move(ev)));
}

Status HostDeviceApi::QueryEvent(DeviceEvent event) {
  Event* e = FindEvent(event);
  if (e == nullptr) return InvalidArgument("unknown event");
  return e->state()->load(std::memory_order_acquire) == 1 ? OkStatus() : NotReady("event");
}

HostDeviceApi::Event* HostDeviceApi::KeepEvent(std::unique_ptr<Event> ev) {
  Event* raw = ev.get();
  std::lock_guard<std::mutex> lock(mu_);
  events_.emplace(raw, std::move(ev));
  return raw;
}

void HostDeviceApi::DestroyEvent(DeviceEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(static_cast<Event*>(event));  // the exporter's also unlinks the name
}

}  // namespace korovod
