#include "sidecar/arena/op_queue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/futex.h"

namespace korovod::sidecar {
namespace {

// A sleep re-checks the deadline and the closed flag at least this often (a safety net: the
// peer's doorbell and Close() wake sleepers at once).
constexpr std::chrono::milliseconds kSleepSlice{100};

std::chrono::nanoseconds SleepFor(const Deadline& d) {
  if (d.at() == Clock::time_point::max()) return kSleepSlice;
  const auto left = d.at() - Clock::now();
  return std::min<std::chrono::nanoseconds>(kSleepSlice, left);
}

void Ring(SharedWord& bell) {
  bell.value.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(bell.value, 1);
}

}  // namespace

void CloseQueue(QueueControl& q) {
  q.closed.value.store(1, std::memory_order_seq_cst);
  q.consumer_bell.value.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(q.consumer_bell.value);
  q.producer_bell.value.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(q.producer_bell.value);
}

RecordRing::RecordRing(QueueControl* control, std::byte* slots, uint32_t capacity,
                       size_t record_bytes, std::string name, WaitPolicy wait)
    : control_(control),
      slots_(slots),
      capacity_(capacity),
      record_bytes_(record_bytes),
      name_(std::move(name)),
      wait_(wait) {
  head_ = head_seen_ = control_->head.value.load(std::memory_order_acquire);
  tail_ = tail_seen_ = control_->tail.value.load(std::memory_order_acquire);
  if (head_ - tail_ > capacity_) Corrupt("index", head_, tail_);
}

void RecordRing::Corrupt(const char* what, uint32_t head, uint32_t tail) {
  if (!broken_.ok()) return;
  broken_ =
      FailedPrecondition(name_ + ": impossible " + what + " (head " + std::to_string(head) +
                         ", tail " + std::to_string(tail) + ", capacity " +
                         std::to_string(capacity_) + "): the peer process corrupted the queue");
}

bool RecordRing::closed() const {
  return control_->closed.value.load(std::memory_order_acquire) != 0;
}

Status RecordRing::status() const {
  if (!broken_.ok()) return broken_;
  if (closed()) return Aborted(name_ + " is closed");
  return OkStatus();
}

bool RecordRing::Writable() {
  if (head_ - tail_seen_ < capacity_) return true;
  // seq_cst: pairs with the consumer's store of tail and load of producer_waiting.
  const uint32_t t = control_->tail.value.load(std::memory_order_seq_cst);
  if (head_ - t > capacity_) {
    Corrupt("tail", head_, t);
    return false;
  }
  tail_seen_ = t;
  return head_ - t < capacity_;
}

bool RecordRing::Readable() {
  if (head_seen_ != tail_) return true;
  const uint32_t h = control_->head.value.load(std::memory_order_seq_cst);
  if (h - tail_ > capacity_) {
    Corrupt("head", h, tail_);
    return false;
  }
  head_seen_ = h;
  return h != tail_;
}

bool RecordRing::TryPush(const void* record) {
  if (!broken_.ok() || closed() || !Writable()) return false;
  std::memcpy(Slot(head_), record, record_bytes_);
  ++head_;
  // Publish, then look for a sleeping consumer (it sets the flag, then re-checks head: one of
  // the two sees the other's store).
  control_->head.value.store(head_, std::memory_order_seq_cst);
  if (control_->consumer_waiting.value.load(std::memory_order_seq_cst) != 0) {
    Ring(control_->consumer_bell);
  }
  return true;
}

bool RecordRing::TryPop(void* record) {
  if (!broken_.ok() || !Readable()) return false;
  std::memcpy(record, Slot(tail_), record_bytes_);  // copied out before the slot is released
  ++tail_;
  control_->tail.value.store(tail_, std::memory_order_seq_cst);
  if (control_->producer_waiting.value.load(std::memory_order_seq_cst) != 0) {
    Ring(control_->producer_bell);
  }
  return true;
}

Status RecordRing::Push(const void* record, Deadline deadline) {
  IdleWaiter idle(wait_);
  for (;;) {
    if (TryPush(record)) return OkStatus();
    KV_RETURN_IF_ERROR(status());
    if (deadline.Expired()) {
      return DeadlineExceeded("timed out waiting for a free slot in the " + name_ + " (" +
                              std::to_string(capacity_) + " slots, all in use)");
    }
    if (!idle.Pause()) continue;
    control_->producer_waiting.value.store(1, std::memory_order_seq_cst);
    const uint32_t bell = control_->producer_bell.value.load(std::memory_order_seq_cst);
    if (!Writable() && broken_.ok() && !closed()) {
      FutexWait(control_->producer_bell.value, bell, SleepFor(deadline));
    }
    control_->producer_waiting.value.store(0, std::memory_order_relaxed);
    idle.Reset();
  }
}

void RecordRing::WakeConsumer() { Ring(control_->consumer_bell); }

Status RecordRing::Pop(void* record, Deadline deadline, const std::atomic<bool>* interrupt) {
  IdleWaiter idle(wait_);
  for (;;) {
    if (TryPop(record)) return OkStatus();
    if (!broken_.ok()) return broken_;
    if (interrupt != nullptr && interrupt->load(std::memory_order_acquire)) {
      return DeadlineExceeded("waiting on the " + name_ + " was interrupted");
    }
    // Records pushed before the close still come out: look once more after seeing the flag.
    if (closed()) return TryPop(record) ? OkStatus() : status();
    if (deadline.Expired()) {
      return DeadlineExceeded("timed out waiting for a record on the " + name_);
    }
    if (!idle.Pause()) continue;
    control_->consumer_waiting.value.store(1, std::memory_order_seq_cst);
    const uint32_t bell = control_->consumer_bell.value.load(std::memory_order_seq_cst);
    if (!Readable() && broken_.ok() && !closed()) {
      FutexWait(control_->consumer_bell.value, bell, SleepFor(deadline));
    }
    control_->consumer_waiting.value.store(0, std::memory_order_relaxed);
    idle.Reset();
  }
}

}  // namespace korovod::sidecar
