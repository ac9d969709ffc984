#include "sidecar/arena/arena.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "common/log.h"
#include "sidecar/arena/op_queue.h"

namespace korovod::sidecar {
namespace {

constexpr mode_t kArenaMode = 0660;

Status CheckName(const std::string& name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || name.find('\0') != std::string::npos) {
    return InvalidArgument("arena name \"" + name +
                           "\" is not a POSIX shared memory name: \"/\" followed by 1-254 "
                           "characters without \"/\"");
  }
  return OkStatus();
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, v);
  return buf;
}

// Whether a live process holds the flock of the arena open at `fd` (its sidecar holds it
// exclusively for life). A client's probe holds it shared for an instant, so a free lock is
// believed only after a few tries.
bool HeldByLiveProcess(int fd) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ::flock(fd, LOCK_UN);
      return false;
    }
    if (errno != EWOULDBLOCK) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// An arena of this name exists. Left by a dead sidecar (a restart in the same pod): removed, so
// the caller may create it again. Held by a live one: an error naming it.
Status ReclaimStale(const std::string& name) {
  int err = 0;
  StatusOr<ShmSegment> old = ShmSegment::Open(name, &err);
  if (!old.ok()) return err == ENOENT ? OkStatus() : old.status().WithContext("arena " + name);
  if (HeldByLiveProcess(old->fd())) {
    return FailedPrecondition("arena " + name +
                              " is in use by a running sidecar (it holds the arena's lock): two "
                              "sidecars with the same KOROVOD_SHM_PREFIX and rank?");
  }
  KV_LOG(kWarning, kArena,
         "arena %s was left by a sidecar that is gone (restarted?): removing it and starting "
         "afresh",
         name.c_str());
  return old->Unlink();
}

std::string MiB(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

Arena::Arena(Key, std::string name, ArenaSide side, ShmSegment segment, ShmMapping mapping)
    : name_(std::move(name)),
      side_(side),
      segment_(std::move(segment)),
      mapping_(std::move(mapping)),
      base_(mapping_.data()) {}

Arena::~Arena() {
  if (attached_) {
    ArenaHeader& h = header();
    CloseQueue(h.submission);
    CloseQueue(h.completion);
    if (side_ == ArenaSide::kSidecar) {
      h.sidecar_alive.value.store(0, std::memory_order_release);
    } else {
      h.client_alive.value.store(0, std::memory_order_release);
    }
  }
  // segment_ unlinks the name (sidecar side, unless Unlink() ran); mapping_ unmaps.
}

StatusOr<std::unique_ptr<Arena>> Arena::Create(const std::string& name, const ArenaSizes& sizes) {
  KV_RETURN_IF_ERROR(CheckName(name));
  auto computed = ComputeArenaLayout(sizes);
  if (!computed.ok()) return computed.status().WithContext("arena " + name);
  const ArenaLayout layout = *computed;

  // Group-shared by design, like the socket. The segment removes the name if anything below
  // fails.
  int err = 0;
  StatusOr<ShmSegment> created = ShmSegment::Create(name, layout.total_bytes, kArenaMode, &err);
  if (!created.ok() && err == EEXIST) {
    KV_RETURN_IF_ERROR(ReclaimStale(name));
    created = ShmSegment::Create(name, layout.total_bytes, kArenaMode, &err);
  }
  if (!created.ok()) {
    return created.status().WithContext("arena " + name + " of " + MiB(layout.total_bytes));
  }
  ShmSegment segment = std::move(created).value();
  // Held for the sidecar's life: how clients and a restarted sidecar tell it is alive.
  if (::flock(segment.fd(), LOCK_EX | LOCK_NB) != 0) {
    return ErrnoStatus(StatusCode::kFailedPrecondition, "flock(arena " + name + ")", errno);
  }
  // Header, queues and the first heap_reserve_bytes of each heap now; the rest as the heaps grow.
  const uint64_t client_end =
      layout.client_heap.offset + std::min(sizes.heap_reserve_bytes, layout.client_heap.bytes);
  const uint64_t result_bytes = std::min(sizes.heap_reserve_bytes, layout.result_heap.bytes);
  if (sizes.reserve_memory) {
    Status reserved = segment.Allocate(0, client_end);
    if (reserved.ok() && result_bytes > 0) {
      reserved = segment.Allocate(layout.result_heap.offset, result_bytes);
    }
    if (!reserved.ok()) {
      return reserved.WithContext("arena " + name + ": cannot reserve " +
                                  MiB(client_end + result_bytes) +
                                  " in /dev/shm (is it large enough? in a pod, mount an emptyDir "
                                  "with medium: Memory there)");
    }
  }
  StatusOr<ShmMapping> mapping = segment.Map(layout.total_bytes, /*reserve_swap=*/false);
  if (!mapping.ok()) return mapping.status().WithContext("arena " + name);
  std::byte* const base = mapping->data();
  auto arena = std::make_unique<Arena>(Key{}, name, ArenaSide::kSidecar, std::move(segment),
                                       std::move(mapping).value());
  arena->layout_ = layout;
  if (sizes.reserve_memory) {
    arena->reserved_[static_cast<int>(ArenaHeap::kClient)] = client_end - layout.client_heap.offset;
    arena->reserved_[static_cast<int>(ArenaHeap::kResult)] = result_bytes;
  }

  // Fresh shm pages are zero; construct the header's objects there, then publish the magic last.
  ArenaHeader* h = std::construct_at(reinterpret_cast<ArenaHeader*>(base));
  h->protocol_version = kProtocolVersion;
  h->header_bytes = kArenaPageBytes;
  h->submission_record_bytes = sizeof(SubmissionRecord);
  h->completion_record_bytes = sizeof(CompletionRecord);
  h->layout = layout;
  h->sidecar_pid.value.store(static_cast<uint32_t>(::getpid()), std::memory_order_relaxed);
  h->sidecar_alive.value.store(1, std::memory_order_relaxed);
  h->magic.store(kArenaMagic, std::memory_order_release);

  arena->attached_ = true;
  return arena;
}

StatusOr<std::unique_ptr<Arena>> Arena::Open(const std::string& name) {
  KV_RETURN_IF_ERROR(CheckName(name));
  int err = 0;
  StatusOr<ShmSegment> opened = ShmSegment::Open(name, &err);
  if (!opened.ok()) {
    if (err == ENOENT) {
      return Unavailable("arena " + name +
                         " does not exist (has the sidecar created it? is /dev/shm shared "
                         "between the trainer and sidecar containers?)");
    }
    if (err == EACCES) {
      return PermissionDenied("arena " + name +
                              " is not accessible (mode 0660): run the trainer as the sidecar's "
                              "user or group");
    }
    return opened.status().WithContext("arena " + name);
  }
  ShmSegment segment = std::move(opened).value();
  StatusOr<uint64_t> size = segment.Size();
  if (!size.ok()) return size.status().WithContext("arena " + name);
  const uint64_t file_bytes = *size;
  if (file_bytes < kArenaPageBytes) {
    return FailedPrecondition("arena " + name + " is " + std::to_string(file_bytes) +
                              " bytes, smaller than its " + std::to_string(kArenaPageBytes) +
                              "-byte header: not a korovod arena, or not initialised yet");
  }
  StatusOr<ShmMapping> mapping = segment.Map(file_bytes, /*reserve_swap=*/false);
  if (!mapping.ok()) return mapping.status().WithContext("arena " + name);
  auto arena = std::make_unique<Arena>(Key{}, name, ArenaSide::kClient, std::move(segment),
                                       std::move(mapping).value());
  ArenaHeader& h = arena->header();

  const uint64_t magic = h.magic.load(std::memory_order_acquire);
  if (magic == 0) return Unavailable("arena " + name + " is not initialised yet");
  if (magic != kArenaMagic) {
    return FailedPrecondition("arena " + name + " is not a korovod arena (magic " + Hex(magic) +
                              ", expected " + Hex(kArenaMagic) + ")");
  }
  // Read each shared field once into a local before judging it.
  const uint32_t version = h.protocol_version;
  if (version != kProtocolVersion) {
    return FailedPrecondition("arena " + name + ": protocol version " + std::to_string(version) +
                              ", this client speaks " + std::to_string(kProtocolVersion) +
                              " (trainer client and sidecar come from different releases)");
  }
  const uint32_t header_bytes = h.header_bytes;
  const uint32_t sub_bytes = h.submission_record_bytes;
  const uint32_t comp_bytes = h.completion_record_bytes;
  if (header_bytes != kArenaPageBytes || sub_bytes != sizeof(SubmissionRecord) ||
      comp_bytes != sizeof(CompletionRecord)) {
    return FailedPrecondition(
        "arena " + name + ": corrupt header (header " + std::to_string(header_bytes) +
        " bytes, submission record " + std::to_string(sub_bytes) + ", completion record " +
        std::to_string(comp_bytes) + "; expected " + std::to_string(kArenaPageBytes) + ", " +
        std::to_string(sizeof(SubmissionRecord)) + ", " + std::to_string(sizeof(CompletionRecord)) +
        ")");
  }
  ArenaLayout stored;
  std::memcpy(&stored, &h.layout, sizeof(stored));
  ArenaSizes sizes;
  sizes.submission_slots = stored.submission_slots;
  sizes.completion_slots = stored.completion_slots;
  sizes.client_heap_bytes = stored.client_heap.bytes;
  sizes.result_heap_bytes = stored.result_heap.bytes;
  auto expected = ComputeArenaLayout(sizes);
  if (!expected.ok()) {
    return FailedPrecondition("arena " + name + ": corrupt header: " + expected.status().message());
  }
  if (!(*expected == stored)) {
    return FailedPrecondition("arena " + name +
                              ": corrupt header: region offsets do not match the layout of "
                              "its sizes");
  }
  if (stored.total_bytes != file_bytes) {
    return FailedPrecondition("arena " + name + ": header says " +
                              std::to_string(stored.total_bytes) + " bytes, the file has " +
                              std::to_string(file_bytes));
  }
  arena->layout_ = stored;
  if (h.sidecar_alive.value.load(std::memory_order_acquire) == 0) {
    return Unavailable("arena " + name + ": its sidecar has shut down");
  }
  uint32_t idle = 0;
  if (!h.client_alive.value.compare_exchange_strong(idle, 1, std::memory_order_acq_rel)) {
    return FailedPrecondition("arena " + name + " already has a client attached (pid " +
                              std::to_string(h.client_pid.value.load(std::memory_order_relaxed)) +
                              ")");
  }
  h.client_pid.value.store(static_cast<uint32_t>(::getpid()), std::memory_order_relaxed);
  h.client_generation.value.fetch_add(1, std::memory_order_acq_rel);
  arena->attached_ = true;
  return arena;
}

Status Arena::Unlink() {
  const Status s = segment_.Unlink();
  if (s.ok()) return s;
  return Status(StatusCode::kFailedPrecondition, "arena " + name_ + ": " + s.message());
}

bool Arena::peer_alive() {
  const SharedWord& w =
      side_ == ArenaSide::kSidecar ? header().client_alive : header().sidecar_alive;
  return w.value.load(std::memory_order_acquire) != 0;
}

Status Arena::Reserve(ArenaHeap heap, uint64_t end) {
  const Region& r = heap_region(heap);
  if (end > r.bytes) {
    return InvalidArgument("arena " + name_ + ": " + std::to_string(end) + " bytes of the " +
                           (heap == ArenaHeap::kClient ? "client" : "result") +
                           " heap, which has " + std::to_string(r.bytes));
  }
  std::lock_guard<std::mutex> lock(reserve_mu_);
  uint64_t& reserved = reserved_[static_cast<int>(heap)];
  if (end <= reserved) return OkStatus();
  const uint64_t target =
      std::min(r.bytes, (end + kReserveStepBytes - 1) / kReserveStepBytes * kReserveStepBytes);
  // posix_fallocate keeps pages already there, so two sides reserving the same range is fine.
  const Status s = segment_.Allocate(r.offset + reserved, target - reserved);
  if (!s.ok()) {
    return s.WithContext("arena " + name_ + ": cannot grow the " +
                         (heap == ArenaHeap::kClient ? "client" : "result") + " heap from " +
                         MiB(reserved) + " to " + MiB(target) +
                         " in /dev/shm (is it large enough? in a pod, mount an emptyDir with "
                         "medium: Memory there)");
  }
  reserved = target;
  return OkStatus();
}

uint64_t Arena::reserved(ArenaHeap heap) {
  std::lock_guard<std::mutex> lock(reserve_mu_);
  return reserved_[static_cast<int>(heap)];
}

Status Arena::CheckSidecar(std::chrono::milliseconds unresponsive_after) {
  ArenaHeader& h = header();
  const std::string who = "the sidecar (pid " +
                          std::to_string(h.sidecar_pid.value.load(std::memory_order_relaxed)) +
                          " in its own PID namespace) of arena " + name_;
  if (h.sidecar_alive.value.load(std::memory_order_acquire) == 0) {
    return Unavailable(who + " has shut down");
  }
  if (::flock(segment_.fd(), LOCK_SH | LOCK_NB) == 0) {
    ::flock(segment_.fd(), LOCK_UN);
    const bool restarted = Replaced();
    return Unavailable(who + " died without shutting down (killed, e.g. by SIGKILL or the OOM " +
                       "killer, or crashed)" +
                       (restarted ? "; a new sidecar has since started in its place (restarted): "
                                    "this session cannot continue"
                                  : ""));
  }
  const auto now = std::chrono::steady_clock::now();
  const uint32_t beat = h.sidecar_heartbeat.value.load(std::memory_order_relaxed);
  if (beat != seen_heartbeat_ || heartbeat_moved_ == std::chrono::steady_clock::time_point{}) {
    seen_heartbeat_ = beat;
    heartbeat_moved_ = now;
  } else if (now - heartbeat_moved_ > unresponsive_after) {
    return DeadlineExceeded(
        who + " has not run for " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(now - heartbeat_moved_).count()) +
        " s (stopped, e.g. by SIGSTOP, or starved of CPU)");
  }
  return OkStatus();
}

bool Arena::Replaced() const {
  struct stat mine {}, now {};
  return ::fstat(segment_.fd(), &mine) == 0 && ::stat(("/dev/shm" + name_).c_str(), &now) == 0 &&
         mine.st_ino != now.st_ino;
}

void Arena::ReleaseClient() { header().client_alive.value.store(0, std::memory_order_release); }

}  // namespace korovod::sidecar
