// OpQueue: a single-producer single-consumer ring of fixed-size records in the arena, one per
// direction (submissions client → sidecar, completions sidecar → client).
//
// Fast path: no syscall. The producer copies the record into the slot and publishes `head`
// (release); the consumer reads `head` (acquire), copies the record out, then publishes `tail`.
// Waiting follows the data plane's WaitPolicy: spin (only while there are cores to spare), then
// sched_yield, then sleep on a futex doorbell. A side announces its sleep in a waiting flag and
// re-checks before sleeping; the other side rings the doorbell (one syscall) only when it sees
// that flag, so an awake peer costs no syscall.
//
// Trust: each side keeps its own index privately and only publishes it; the peer's index is read
// and checked (head - tail <= capacity), slots are indexed modulo the capacity, and records are
// copied out before use, so a misbehaving peer can feed garbage (which ValidateSubmission refuses)
// but never make this side touch memory outside the ring.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "common/wait_policy.h"
#include "sidecar/arena/arena.h"
#include "sidecar/arena/arena_layout.h"

namespace korovod::sidecar {

// Marks the queue closed and wakes both sides; pending records can still be popped, pushes fail.
// Either process may close (shutdown, session end); Arena's destructor closes both queues.
void CloseQueue(QueueControl& q);

// The untyped ring; OpQueue<Record> below is the interface to use.
class RecordRing {
 public:
  RecordRing(QueueControl* control, std::byte* slots, uint32_t capacity, size_t record_bytes,
             std::string name, WaitPolicy wait);

  bool TryPush(const void* record);
  bool TryPop(void* record);
  Status Push(const void* record, Deadline deadline);
  // `interrupt` (optional): once it is set and the consumer woken (WakeConsumer), Pop returns
  // DeadlineExceeded as if its deadline had passed.
  Status Pop(void* record, Deadline deadline, const std::atomic<bool>* interrupt = nullptr);
  // Wakes a consumer sleeping in Pop (it re-checks its interrupt flag).
  void WakeConsumer();
  void Close() { CloseQueue(*control_); }
  bool closed() const;
  // Why TryPush/TryPop returned false other than full/empty: Aborted once closed,
  // FailedPrecondition if the peer's index is impossible (corrupt). OK otherwise.
  Status status() const;
  uint32_t capacity() const { return capacity_; }
  const std::string& name() const { return name_; }

 private:
  std::byte* Slot(uint32_t index) const {
    return slots_ + static_cast<size_t>(index & (capacity_ - 1)) * record_bytes_;
  }
  bool Readable();  // consumer: a record is ready (refreshes the cached head)
  bool Writable();  // producer: a slot is free (refreshes the cached tail)
  void Corrupt(const char* what, uint32_t head, uint32_t tail);

  QueueControl* control_;
  std::byte* slots_;
  uint32_t capacity_;
  size_t record_bytes_;
  std::string name_;
  WaitPolicy wait_;
  // Producer state: its own head, and the last tail seen.
  uint32_t head_;
  uint32_t tail_seen_;
  // Consumer state: its own tail, and the last head seen.
  uint32_t tail_;
  uint32_t head_seen_;
  Status broken_;
};

template <typename Record>
struct QueueOf;
template <>
struct QueueOf<SubmissionRecord> {
  static constexpr const char* kName = "submission queue";
  static QueueControl* Control(Arena& a) { return &a.header().submission; }
  static std::byte* Slots(Arena& a) { return a.submission_slots().data(); }
  static uint32_t Capacity(const Arena& a) { return a.layout().submission_slots; }
};
template <>
struct QueueOf<CompletionRecord> {
  static constexpr const char* kName = "completion queue";
  static QueueControl* Control(Arena& a) { return &a.header().completion; }
  static std::byte* Slots(Arena& a) { return a.completion_slots().data(); }
  static uint32_t Capacity(const Arena& a) { return a.layout().completion_slots; }
};

// A typed view of one of the arena's queues; `arena` must outlive it. Use one producer object on
// one side and one consumer object on the other (each keeps its index privately); an object is not
// thread-safe: one thread pushes, one thread pops.
template <typename Record>
class OpQueue {
 public:
  explicit OpQueue(Arena& arena, WaitPolicy wait = WaitPolicy{})
      : ring_(QueueOf<Record>::Control(arena), QueueOf<Record>::Slots(arena),
              QueueOf<Record>::Capacity(arena), sizeof(Record),
              std::string(QueueOf<Record>::kName) + " of arena " + arena.name(), wait) {}

  // False when full (or closed/corrupt: see status()).
  bool TryPush(const Record& r) { return ring_.TryPush(&r); }
  // False when empty (or corrupt: see status()); records pushed before a close still pop.
  bool TryPop(Record* out) { return ring_.TryPop(out); }
  // Wait for space/a record until the deadline: DeadlineExceeded, Aborted once closed.
  Status Push(const Record& r, Deadline d) { return ring_.Push(&r, d); }
  Status Pop(Record* out, Deadline d, const std::atomic<bool>* interrupt = nullptr) {
    return ring_.Pop(out, d, interrupt);
  }
  void WakeConsumer() { ring_.WakeConsumer(); }
  void Close() { ring_.Close(); }
  bool closed() const { return ring_.closed(); }
  Status status() const { return ring_.status(); }
  uint32_t capacity() const { return ring_.capacity(); }

 private:
  RecordRing ring_;
};

using SubmissionQueue = OpQueue<SubmissionRecord>;
using CompletionQueue = OpQueue<CompletionRecord>;

}  // namespace korovod::sidecar
