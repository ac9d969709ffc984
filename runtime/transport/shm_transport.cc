#include "runtime/transport/shm_transport.h"

#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/futex.h"
#include "common/shared_memory.h"

namespace korovod {
namespace {

constexpr uint64_t kSegmentMagic = 0x4b56534d31ull;  // "KVSM1"
constexpr int kSleepSliceMs = 50;  // re-check the deadline and peer liveness this often
// A segment name on the wire between ranks: NAME_MAX plus the NUL.
constexpr size_t kNameBytes = 256;

// Counters live on their own cache lines so the two sides do not false-share.
struct alignas(64) PaddedCounter {
  std::atomic<uint32_t> value{0};
};

// What a rank posts for its peers (SharedWindows::Post): valid only between two barriers.
struct MailboxEntry {
  uint32_t valid;
  uint32_t region;
  uint64_t offset;
};

struct SegmentHeader {
  uint64_t magic;
  uint64_t ring_bytes;
  uint64_t ranks;         // rings and barrier counters: one per rank
  uint64_t window_bytes;  // the window at the segment's end
  alignas(64) MailboxEntry mailbox[SharedWindows::kMailboxSlots];
  PaddedCounter doorbell;  // bumped by any peer that made progress this rank may wait for
  PaddedCounter sleeping;  // 1 while this rank is (about to be) blocked on the doorbell
};

// One inbound ring per sender. Each slot starts with a sequence word on the same cache line as
// the first payload bytes, so a small message costs the receiver one cache-line transfer (seq and
// data together); `tail` (slots consumed) flows back to the sender, which caches it and re-reads
// it only when the ring looks full.
struct RingHeader {
  PaddedCounter tail;
};

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> seq;  // k-th slot written to this ring carries k+1
};
constexpr size_t kSlotHeaderBytes = 16;  // payload starts 16 bytes in, on the seq's cache line

// Slot pitch: header + payload, rounded to cache lines.
size_t Stride(size_t slot_bytes) { return (kSlotHeaderBytes + slot_bytes + 63) / 64 * 64; }

}  // namespace

// A mapped segment: header, one ring per possible sender (indexed by global rank), one barrier
// counter per peer (barriers this rank has entered with it), then the window, page-aligned.
class RingSegment {
 public:
  explicit RingSegment(ShmMapping mapping) : mapping_(std::move(mapping)), base_(mapping_.data()) {}

  SegmentHeader* header() { return reinterpret_cast<SegmentHeader*>(base_); }
  RingHeader* ring(int sender) { return reinterpret_cast<RingHeader*>(RingBase(sender)); }
  // Slot `index` of the ring from `sender`; its payload is at +kSlotHeaderBytes.
  std::byte* slot(int sender, uint32_t index, size_t stride) {
    return RingBase(sender) + sizeof(RingHeader) + static_cast<size_t>(index) * stride;
  }
  static std::atomic<uint32_t>* seq(std::byte* slot) {
    return &reinterpret_cast<SlotHeader*>(slot)->seq;
  }

  // Rings the doorbell; wakes the owner only if it is blocked (no syscall otherwise).
  void Ring() {
    header()->doorbell.value.fetch_add(1, std::memory_order_seq_cst);
    if (header()->sleeping.value.load(std::memory_order_seq_cst) != 0) {
      FutexWake(header()->doorbell.value, 1);
    }
  }

  std::atomic<uint32_t>* barriers(int peer) {
    return &reinterpret_cast<PaddedCounter*>(CountersBase())[peer].value;
  }
  std::byte* window() {
    return base_ + WindowOffset(static_cast<int>(header()->ranks), header()->ring_bytes);
  }

  static size_t WindowOffset(int ranks, size_t ring_bytes) {
    const size_t counters_end = sizeof(SegmentHeader) + static_cast<size_t>(ranks) * ring_bytes +
                                static_cast<size_t>(ranks) * sizeof(PaddedCounter);
    return (counters_end + 4095) / 4096 * 4096;
  }
  static size_t Bytes(int ranks, size_t ring_bytes, size_t window_bytes) {
    return WindowOffset(ranks, ring_bytes) + window_bytes;
  }

 private:
  std::byte* CountersBase() {
    return base_ + sizeof(SegmentHeader) + header()->ranks * header()->ring_bytes;
  }
  std::byte* RingBase(int sender) {
    return base_ + sizeof(SegmentHeader) + static_cast<size_t>(sender) * header()->ring_bytes;
  }
  ShmMapping mapping_;
  std::byte* base_;
};

namespace {

// Maps a peer's segment, checking its size first: touching past the end of a shorter object
// (a peer with other shm_slot_bytes/shm_slots) would be a SIGBUS, not an error.
StatusOr<std::unique_ptr<RingSegment>> MapPeerSegment(const std::string& name, size_t bytes) {
  KV_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::Open(name));
  KV_ASSIGN_OR_RETURN(const uint64_t size, segment.Size());
  if (size < bytes) {
    return FailedPrecondition(name + " is " + std::to_string(size) + " bytes, expected " +
                              std::to_string(bytes) +
                              " (mismatched shm_slot_bytes/shm_slots/shm_window_bytes?)");
  }
  KV_ASSIGN_OR_RETURN(ShmMapping mapping, segment.Map(bytes));
  return std::make_unique<RingSegment>(std::move(mapping));
}

}  // namespace

ShmTransport::ShmTransport(std::shared_ptr<PeerMesh> mesh, size_t slot_bytes, int slots,
                           size_t window_bytes, WaitPolicy wait)
    : mesh_(std::move(mesh)),
      slot_bytes_(slot_bytes),
      slots_(static_cast<uint32_t>(slots)),
      window_bytes_(window_bytes),
      wait_(wait) {
  segments_.resize(mesh_->size());
  peers_.resize(mesh_->size());
}

ShmTransport::~ShmTransport() = default;

StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(
    std::shared_ptr<PeerMesh> mesh, size_t slot_bytes, int slots, size_t window_bytes,
    const std::vector<SharedRegion>& regions, WaitPolicy wait, Deadline deadline,
    const std::string& name_prefix, std::vector<int> members) {
  if (slot_bytes < 4096 || slot_bytes % 64 != 0) {
    return InvalidArgument("shm_slot_bytes must be a multiple of 64 and at least 4096, got " +
                           std::to_string(slot_bytes));
  }
  if (slots < 2 || slots > 1024) {
    return InvalidArgument("shm_slots must be in [2, 1024], got " + std::to_string(slots));
  }
  if (window_bytes % 64 != 0) {
    return InvalidArgument("shm_window_bytes must be a multiple of 64, got " +
                           std::to_string(window_bytes));
  }
  if (name_prefix.size() < 2 || name_prefix.size() > kMaxNamePrefixBytes ||
      name_prefix.front() != '/' || name_prefix.find('/', 1) != std::string::npos) {
    return InvalidArgument("shm_prefix \"" + name_prefix + "\" must be \"/\" and 1 to " +
                           std::to_string(kMaxNamePrefixBytes - 1) +
                           " more characters without \"/\"");
  }
  auto t = std::make_unique<ShmTransport>(mesh, slot_bytes, slots, window_bytes, wait);
  const int me = mesh->rank();
  const int n = mesh->size();
  if (members.empty()) {
    for (int p = 0; p < n; ++p) members.push_back(p);
  }
  if (std::find(members.begin(), members.end(), me) == members.end() ||
      std::any_of(members.begin(), members.end(), [n](int p) { return p < 0 || p >= n; })) {
    return InvalidArgument("shared-memory members must be ranks of the world, this one among them");
  }
  const size_t ring_bytes = sizeof(RingHeader) + Stride(slot_bytes) * static_cast<size_t>(slots);
  // The window is /dev/shm pages on first touch, like the rings: an unused one costs nothing.
  const size_t seg_bytes = RingSegment::Bytes(n, ring_bytes, window_bytes);

  unsigned char nonce[8];
  if (RAND_bytes(nonce, sizeof nonce) != 1) return Internal("RAND_bytes failed");
  std::vector<std::string> names;  // the segment's, then every region's
  char name[kNameBytes] = {};
  std::snprintf(name, sizeof name, "%s%d-r%d-%02x%02x%02x%02x%02x%02x%02x%02x", name_prefix.c_str(),
                static_cast<int>(::getpid()), me, nonce[0], nonce[1], nonce[2], nonce[3], nonce[4],
                nonce[5], nonce[6], nonce[7]);
  // Owner only: all ranks are one user. `own` unlinks the name on any early return.
  KV_ASSIGN_OR_RETURN(ShmSegment own, ShmSegment::Create(name, seg_bytes, 0600));
  KV_ASSIGN_OR_RETURN(ShmMapping own_mapping, own.Map(seg_bytes));
  t->segments_[me] = std::make_unique<RingSegment>(std::move(own_mapping));
  t->segments_[me]->header()->magic = kSegmentMagic;
  t->segments_[me]->header()->ring_bytes = ring_bytes;
  t->segments_[me]->header()->ranks = static_cast<uint64_t>(n);
  t->segments_[me]->header()->window_bytes = window_bytes;

  // Trade names (the segment's, then the shared regions'), map, then confirm; the creator
  // unlinks its segment once everyone holds a mapping.
  names.push_back(name);
  for (const SharedRegion& r : regions) {
    if (r.shm_name.size() + 1 > kNameBytes || r.base == nullptr || r.bytes == 0) {
      return InvalidArgument("shared region \"" + r.shm_name +
                             "\" needs a name, a base and a size");
    }
    names.push_back(r.shm_name);
  }
  t->own_regions_ = regions;
  t->regions_.resize(n);
  Status s;
  for (int p : members) {
    if (p == me || !s.ok()) continue;
    for (const std::string& nm : names) {
      char wire[kNameBytes] = {};
      std::memcpy(wire, nm.data(), nm.size());
      if (s.ok()) s = WriteFull(mesh->fd(p, 0), wire, kNameBytes, deadline, mesh->Describe(p));
    }
  }
  for (int p : members) {
    if (p == me || !s.ok()) continue;
    char peer_name[kNameBytes];
    s = ReadFull(mesh->fd(p, 0), peer_name, kNameBytes, deadline, mesh->Describe(p));
    if (!s.ok()) break;
    peer_name[kNameBytes - 1] = '\0';
    for (const SharedRegion& r : regions) {
      char region_name[kNameBytes];
      s = ReadFull(mesh->fd(p, 0), region_name, kNameBytes, deadline, mesh->Describe(p));
      if (!s.ok()) break;
      region_name[kNameBytes - 1] = '\0';
      // Checked first: touching past the end of a shorter object would be a SIGBUS.
      auto region = ShmSegment::Open(region_name);
      auto size = region.ok() ? region->Size() : StatusOr<uint64_t>(region.status());
      if (size.ok() && *size < r.bytes) {
        size = FailedPrecondition("it is " + std::to_string(*size) + " bytes, this rank's " +
                                  std::to_string(r.bytes) + " (a different arena size?)");
      }
      auto mapping = size.ok() ? region->Map(r.bytes) : StatusOr<ShmMapping>(size.status());
      if (!mapping.ok()) {
        s = mapping.status().WithContext("mapping the shared region " + std::string(region_name) +
                                         " of " + mesh->Describe(p));
        break;
      }
      t->regions_[p].push_back(std::move(mapping).value());
    }
    if (!s.ok()) break;
    auto mapped = MapPeerSegment(peer_name, seg_bytes);
    if (!mapped.ok()) {
      s = mapped.status().WithContext("mapping the shared memory of " + mesh->Describe(p) +
                                      " (are all ranks on one host?)");
      break;
    }
    t->segments_[p] = std::move(mapped).value();
    if (t->segments_[p]->header()->magic != kSegmentMagic ||
        t->segments_[p]->header()->ring_bytes != ring_bytes ||
        t->segments_[p]->header()->ranks != static_cast<uint64_t>(n) ||
        t->segments_[p]->header()->window_bytes != window_bytes) {
      s = FailedPrecondition(
          "shared memory of " + mesh->Describe(p) +
          " has a different layout (mismatched shm_slot_bytes/shm_slots/shm_window_bytes?)");
    }
  }
  const char ack = s.ok() ? 1 : 0;
  for (int p : members) {
    if (p != me && s.ok()) s = WriteFull(mesh->fd(p, 0), &ack, 1, deadline, mesh->Describe(p));
  }
  for (int p : members) {
    if (p == me || !s.ok()) continue;
    char their = 0;
    s = ReadFull(mesh->fd(p, 0), &their, 1, deadline, mesh->Describe(p));
    if (s.ok() && their != 1) s = Unavailable(mesh->Describe(p) + " failed to map shared memory");
  }
  // Unlinked whatever happened: every peer has mapped it by now, or the transport failed. An
  // error here (a launcher's cleanup removed the name first) changes neither.
  (void)own.Unlink();
  KV_RETURN_IF_ERROR(s);
  return t;
}

Status ShmTransport::Fail(Status s) {
  if (broken_.ok()) broken_ = s;
  return s;
}

Status ShmTransport::BlockUntilRung(FunctionRef<bool()> ready, Clock::time_point& last_check,
                                    Deadline deadline) {
  // Announce the sleep first, then re-check, so a peer that makes progress after the check sees
  // `sleeping` and wakes us (no lost wake-up).
  SegmentHeader* h = segments_[mesh_->rank()]->header();
  h->sleeping.value.store(1, std::memory_order_seq_cst);
  const uint32_t bell = h->doorbell.value.load(std::memory_order_seq_cst);
  if (!ready()) {
    const int ms = std::min(kSleepSliceMs, deadline.RemainingMs());
    FutexWait(h->doorbell.value, bell, std::chrono::milliseconds(ms));
  }
  h->sleeping.value.store(0, std::memory_order_relaxed);
  // A dead peer never rings: a sleep that ran its full slice is the cue to look (a poll per
  // ordinary wake-up would sit on the latency path).
  if (Clock::now() - last_check >= std::chrono::milliseconds(kSleepSliceMs)) {
    last_check = Clock::now();
    if (Status alive = mesh_->CheckPeersAlive(); !alive.ok()) return Fail(alive);
  }
  return OkStatus();
}

std::byte* ShmTransport::window(int rank) { return segments_[rank]->window(); }

bool ShmTransport::Locate(const void* p, size_t len, Location* where) {
  const auto* b = static_cast<const std::byte*>(p);
  auto inside = [&](const std::byte* base, size_t bytes) {
    return b >= base && len <= bytes && static_cast<size_t>(b - base) <= bytes - len;
  };
  if (inside(window(mesh_->rank()), window_bytes_)) {
    *where = {0, static_cast<uint64_t>(b - window(mesh_->rank()))};
    return true;
  }
  for (size_t k = 0; k < own_regions_.size(); ++k) {
    if (inside(own_regions_[k].base, own_regions_[k].bytes)) {
      *where = {static_cast<uint32_t>(k + 1), static_cast<uint64_t>(b - own_regions_[k].base)};
      return true;
    }
  }
  return false;
}

std::byte* ShmTransport::Resolve(int rank, const Location& where) {
  if (where.region == 0) return window(rank) + where.offset;
  std::byte* base = rank == mesh_->rank() ? own_regions_[where.region - 1].base
                                          : regions_[rank][where.region - 1].data();
  return base + where.offset;
}

void ShmTransport::Post(int slot, const Location& where, bool valid) {
  MailboxEntry& e = segments_[mesh_->rank()]->header()->mailbox[slot];
  e.valid = valid ? 1 : 0;
  e.region = where.region;
  e.offset = where.offset;
}

bool ShmTransport::Read(int rank, int slot, Location* where) {
  const MailboxEntry& e = segments_[rank]->header()->mailbox[slot];
  // A peer's entry is only trusted as far as its region table reaches.
  if (e.valid == 0 || e.region > own_regions_.size()) return false;
  const size_t bytes = e.region == 0 ? window_bytes_ : own_regions_[e.region - 1].bytes;
  if (e.offset > bytes) return false;
  *where = {e.region, e.offset};
  return true;
}

Status ShmTransport::Barrier(const std::vector<int>& ranks, Deadline deadline) {
  if (!broken_.ok()) return broken_;
  const int me = mesh_->rank();
  RingSegment* own = segments_[me].get();
  for (int p : ranks) {
    if (p != me && !member(p)) {
      return InvalidArgument(mesh_->Describe(p) + " does not share this rank's shared memory");
    }
  }
  for (int p : ranks) {
    if (p == me) continue;
    // Release: this rank's window writes are visible to a peer that sees the count.
    own->barriers(p)->store(++peers_[p].barriers, std::memory_order_seq_cst);
    segments_[p]->Ring();
  }
  // Wrap-safe "the peer has entered at least as many barriers with us as we with it".
  auto arrived = [&](int p) {
    const uint32_t theirs = segments_[p]->barriers(me)->load(std::memory_order_acquire);
    return static_cast<int32_t>(theirs - peers_[p].barriers) >= 0;
  };
  auto all_arrived = [&] {
    for (int p : ranks) {
      if (p != me && !arrived(p)) return false;
    }
    return true;
  };
  IdleWaiter idle(wait_);
  Clock::time_point last_liveness_check = Clock::now();
  while (!all_arrived()) {
    if (!idle.Pause()) continue;
    idle.Reset();
    KV_RETURN_IF_ERROR(BlockUntilRung(all_arrived, last_liveness_check, deadline));
    if (deadline.Expired() && !all_arrived()) {
      std::string missing;
      for (int p : ranks) {
        if (p != me && !arrived(p)) missing += (missing.empty() ? "" : ", ") + mesh_->Describe(p);
      }
      return Fail(DeadlineExceeded("timed out at a shared-memory barrier waiting for " + missing));
    }
  }
  return OkStatus();
}

Status ShmTransport::Exchange(const SendSpec& send, const RecvSpec& recv, Deadline deadline) {
  if (!broken_.ok()) return broken_;
  const int me = mesh_->rank();
  if (send.peer == me || recv.peer == me) {
    return InvalidArgument("a rank cannot exchange with itself");
  }
  for (int p : {send.peer, recv.peer}) {
    if (p >= 0 && !member(p)) {
      return InvalidArgument(mesh_->Describe(p) + " does not share this rank's shared memory");
    }
  }
  const size_t slot = slot_bytes_;
  const size_t stride = Stride(slot);
  const uint32_t send_slots =
      send.peer >= 0 ? static_cast<uint32_t>((send.len + slot - 1) / slot) : 0;
  const uint32_t recv_slots =
      recv.peer >= 0 ? static_cast<uint32_t>((recv.len + slot - 1) / slot) : 0;
  RingSegment* own = segments_[me].get();
  RingSegment* out_seg = send_slots ? segments_[send.peer].get() : nullptr;
  RingHeader* out = send_slots ? out_seg->ring(me) : nullptr;
  RingHeader* in = recv_slots ? own->ring(recv.peer) : nullptr;
  RingSegment* in_seg = recv_slots ? segments_[recv.peer].get() : nullptr;
  PeerState* tx = send_slots ? &peers_[send.peer] : nullptr;
  PeerState* rx = recv_slots ? &peers_[recv.peer] : nullptr;

  // Non-blocking attempts; each moves at most one slot so sending and receiving interleave.
  auto try_send = [&](uint32_t done) {
    if (tx->sent - tx->tail_seen >= slots_) {
      tx->tail_seen = out->tail.value.load(std::memory_order_acquire);
      if (tx->sent - tx->tail_seen >= slots_) return false;
    }
    std::byte* s = out_seg->slot(me, tx->sent % slots_, stride);
    const size_t off = static_cast<size_t>(done) * slot;
    std::memcpy(s + kSlotHeaderBytes, send.data + off, std::min(slot, send.len - off));
    RingSegment::seq(s)->store(++tx->sent, std::memory_order_release);
    out_seg->Ring();
    return true;
  };
  auto recv_ready = [&] {
    std::byte* s = own->slot(recv.peer, rx->received % slots_, stride);
    return RingSegment::seq(s)->load(std::memory_order_acquire) == rx->received + 1;
  };
  auto try_recv = [&](uint32_t done) {
    if (!recv_ready()) return false;
    const std::byte* data = own->slot(recv.peer, rx->received % slots_, stride) + kSlotHeaderBytes;
    const size_t off = static_cast<size_t>(done) * slot;
    const size_t n = std::min(slot, recv.len - off);
    if (recv.dest != nullptr) {
      std::memcpy(recv.dest + off, data, n);
    } else {
      (*recv.consume)(off, data, n);
    }
    in->tail.value.store(++rx->received, std::memory_order_release);
    in_seg->Ring();  // the sender may be waiting for a free slot
    return true;
  };

  uint32_t sent = 0, received = 0;
  IdleWaiter idle(wait_);
  Clock::time_point last_liveness_check = Clock::now();
  while (sent < send_slots || received < recv_slots) {
    bool progressed = false;
    if (sent < send_slots && try_send(sent)) {
      ++sent;
      progressed = true;
    }
    if (received < recv_slots && try_recv(received)) {
      ++received;
      progressed = true;
    }
    if (progressed) {
      idle.Reset();
      continue;
    }
    if (!idle.Pause()) continue;

    idle.Reset();
    KV_RETURN_IF_ERROR(BlockUntilRung(
        [&] {
          return (sent < send_slots &&
                  tx->sent - out->tail.value.load(std::memory_order_seq_cst) < slots_) ||
                 (received < recv_slots && recv_ready());
        },
        last_liveness_check, deadline));
    if (deadline.Expired()) {
      std::string what;
      if (received < recv_slots) {
        what = "waiting to receive " + std::to_string(recv.len - received * slot) + " of " +
               std::to_string(recv.len) + " bytes from " + mesh_->Describe(recv.peer);
      }
      if (sent < send_slots) {
        what += (what.empty() ? "" : " and ") + std::string("waiting for ") +
                mesh_->Describe(send.peer) + " to take " + std::to_string(send.len - sent * slot) +
                " more bytes";
      }
      return Fail(DeadlineExceeded("timed out " + what + " (shared memory)"));
    }
  }
  return OkStatus();
}

}  // namespace korovod
