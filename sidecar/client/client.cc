#include "sidecar/client/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "korovod/sidecar/v1/sidecar.grpc.pb.h"
#include "sidecar/arena/arena.h"
#include "sidecar/arena/heap_allocator.h"
#include "sidecar/arena/op_queue.h"
#include "sidecar/arena/record_mapping.h"
#include "sidecar/arena/record_validation.h"
#include "sidecar/client/memory_channel_client.h"
#include "sidecar/control/grpc_status.h"
#include "sidecar/control/protocol_version.h"

namespace korovod::sidecar {

// What the client's objects share: the arena, the client heap allocator, the submission queue.
class ClientCore : public std::enable_shared_from_this<ClientCore> {
 public:
  ClientCore(std::unique_ptr<Arena> arena, std::chrono::milliseconds unresponsive_after)
      : unresponsive_after_(unresponsive_after),
        arena_(std::move(arena)),
        heap_(arena_->layout().client_heap.bytes, "client heap of arena " + arena_->name(),
              [a = arena_.get()](uint64_t end) { return a->Reserve(ArenaHeap::kClient, end); }),
        submissions_(*arena_),
        completions_(*arena_) {}

  Arena& arena() { return *arena_; }
  HeapAllocator& heap() { return heap_; }
  // The owner of the client-heap block at `offset`.
  ArenaBuffer Buffer(uint64_t offset, uint64_t bytes);
  // The client-heap offset of [data, data + bytes) when it lies in the heap (bytes > 0).
  std::optional<uint64_t> HeapOffsetOf(const void* data, uint64_t bytes);

  // Copy accounting (ClientCopyStats): what zero copy saves is otherwise invisible.
  void CountArenaTensor() { arena_tensors_.fetch_add(1, std::memory_order_relaxed); }
  void CountStagedIn(uint64_t bytes) {
    staged_tensors_.fetch_add(1, std::memory_order_relaxed);
    staged_in_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void CountStagedOut(uint64_t bytes) {
    staged_out_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  ClientCopyStats copy_stats() const {
    ClientCopyStats c;
    c.staged_in_bytes = staged_in_bytes_.load(std::memory_order_relaxed);
    c.staged_out_bytes = staged_out_bytes_.load(std::memory_order_relaxed);
    c.staged_tensors = staged_tensors_.load(std::memory_order_relaxed);
    c.arena_tensors = arena_tensors_.load(std::memory_order_relaxed);
    return c;
  }
  // Completions are popped by one thread at a time, the holder of poll_mu(): the completion
  // thread, or a thread waiting in ClientHandle::Wait, which then completes its own op without a
  // thread switch (a wake-up costs several microseconds on a VM). The completion thread stands
  // aside while such a waiter exists.
  std::timed_mutex& poll_mu() { return poll_mu_; }
  // With poll_mu() held: pops what arrives before `deadline` (or until `interrupt` is set) and
  // completes it. Returns false once the queue is finished (closed, or the sidecar is gone): every
  // op still pending has then failed with the reason.
  bool PollOnce(Deadline deadline, const std::atomic<bool>* interrupt);
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Once finished: why (the sidecar shut down, died, or stopped running), for later submissions.
  Status failure() const {
    std::lock_guard<std::mutex> lock(pending_mu_);
    return failure_;
  }
  // Waits for `st` to complete, polling the completions itself when no other thread does.
  Status WaitFor(HandleState& st, Deadline deadline);
  int direct_waiters() const { return direct_waiters_.load(std::memory_order_acquire); }
  // The completion thread stands aside while a waiter polls and for a while after the last one
  // left: a training loop waits again soon, and taking the queue back and forth would cost the
  // very wake-ups that waiting directly saves.
  bool waiters_active() const;
  void StandAside(std::chrono::milliseconds slice);
  std::atomic<bool>& reader_interrupt() { return reader_interrupt_; }

  // Registers `state` under a fresh op id and pushes the record.
  Status Submit(SubmissionRecord& r, std::shared_ptr<HandleState> state);
  // The records of one grouped allreduce: a fresh group id, pushed back to back (one lock, so
  // groups of concurrent callers do not interleave). If a push fails, the members already pushed
  // never run (the sidecar holds an incomplete group until this client detaches), so none of the
  // group stays pending here: the call fails as a whole.
  Status SubmitGroup(std::vector<SubmissionRecord>& records,
                     const std::vector<std::shared_ptr<HandleState>>& states);
  // Gives a result-heap block back to the sidecar (best effort).
  void Release(uint64_t offset);
  std::shared_ptr<HandleState> Take(uint64_t op_id);
  std::vector<std::shared_ptr<HandleState>> TakeAll();

 private:
  // Under submit_mu_: a fresh op id (and default name) for `r`, `state` pending under it.
  Status Register(SubmissionRecord& r, const std::shared_ptr<HandleState>& state);
  void Unregister(uint64_t op_id);

  const std::chrono::milliseconds unresponsive_after_;  // the sidecar's op timeout
  std::unique_ptr<Arena> arena_;
  HeapAllocator heap_;
  std::mutex submit_mu_;
  SubmissionQueue submissions_;
  uint64_t next_op_id_ = 1;
  uint64_t next_group_id_ = 1;
  uint64_t next_release_id_ = 1;
  CompletionQueue completions_;
  mutable std::mutex pending_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<HandleState>> pending_;
  Status failure_;  // guarded by pending_mu_: set with finished_
  std::atomic<uint64_t> staged_in_bytes_{0};
  std::atomic<uint64_t> staged_out_bytes_{0};
  std::atomic<uint64_t> staged_tensors_{0};
  std::atomic<uint64_t> arena_tensors_{0};
  // Completion polling (see poll_mu()).
  void Complete(const CompletionRecord& c);
  std::timed_mutex poll_mu_;
  std::atomic<int> direct_waiters_{0};
  std::atomic<int64_t> last_waiter_left_ns_{0};  // steady clock
  std::atomic<bool> reader_interrupt_{false};
  std::atomic<bool> finished_{false};
};

struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  TensorShape shape;
  std::vector<int64_t> splits;
  int last_joined_rank = -1;
  std::span<const std::byte> output;
  std::string name;
  // Staging (plain memory outside the arena): the output is copied out and the blocks freed on
  // completion, so a burst of ops never holds more of the heap than the ops still in flight.
  // staging_out only when the input was not staged (it is in the arena) but the output is not.
  ArenaBuffer staging_in;
  ArenaBuffer staging_out;
  void* copy_out = nullptr;
  uint64_t copy_bytes = 0;
  // A result-heap output, released when the handle goes.
  std::shared_ptr<ClientCore> core;
  bool result_block = false;
  uint64_t result_offset = 0;

  ~HandleState() {
    if (result_block && core) core->Release(result_offset);
  }
  // Run once, on the thread that completes the op, after `done` is set (ClientHandle::OnDone).
  std::vector<std::function<void()>> on_done;

  void Finish(Status s) {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
      callbacks.swap(on_done);
      cv.notify_all();
    }
    for (auto& cb : callbacks) cb();
  }
};

Status ClientCore::Register(SubmissionRecord& r, const std::shared_ptr<HandleState>& state) {
  r.op_id = next_op_id_++;
  if (r.name_len == 0) {
    KV_RETURN_IF_ERROR(
        SetName(r, std::string(RecordOpTypeName(r.op_type)) + ".client" + std::to_string(r.op_id)));
  }
  state->name = std::string(NameOf(r));
  std::lock_guard<std::mutex> plock(pending_mu_);
  // Nothing would ever complete it: no one polls a finished queue (set under this lock).
  if (finished()) {
    if (failure_.code() != StatusCode::kUnavailable ||
        failure_.message().find("(restarted)") != std::string::npos || !arena_->Replaced()) {
      return failure_;
    }
    return Status(failure_.code(), failure_.message() +
                                       "; a new sidecar has since started in its place "
                                       "(restarted): start a new session (hvd.init)");
  }
  pending_[r.op_id] = state;
  return OkStatus();
}

void ClientCore::Unregister(uint64_t op_id) {
  std::lock_guard<std::mutex> plock(pending_mu_);
  pending_.erase(op_id);
}

Status ClientCore::Submit(SubmissionRecord& r, std::shared_ptr<HandleState> state) {
  std::lock_guard<std::mutex> lock(submit_mu_);
  KV_RETURN_IF_ERROR(Register(r, state));
  Status s = submissions_.Push(r, Deadline::After(std::chrono::seconds(60)));
  if (!s.ok()) {
    Unregister(r.op_id);
    return s.WithContext("submitting " + state->name);
  }
  return OkStatus();
}

Status ClientCore::SubmitGroup(std::vector<SubmissionRecord>& records,
                               const std::vector<std::shared_ptr<HandleState>>& states) {
  std::lock_guard<std::mutex> lock(submit_mu_);
  const uint64_t group_id = next_group_id_++;
  Status s;
  size_t registered = 0;
  for (; registered < records.size() && s.ok(); ++registered) {
    records[registered].group_id = group_id;
    records[registered].group_size = static_cast<uint32_t>(records.size());
    s = Register(records[registered], states[registered]);
  }
  for (size_t i = 0; i < records.size() && s.ok(); ++i) {
    s = submissions_.Push(records[i], Deadline::After(std::chrono::seconds(60)));
    if (!s.ok()) s = s.WithContext("submitting " + states[i]->name + " of a grouped allreduce");
  }
  if (s.ok()) return s;
  for (size_t i = 0; i < registered; ++i) Unregister(records[i].op_id);
  return s;
}

void ClientCore::Release(uint64_t offset) {
  SubmissionRecord r{};
  r.kind = RecordKind::kReleaseResult;
  r.output_offset = offset;
  std::lock_guard<std::mutex> lock(submit_mu_);
  r.op_id = (uint64_t{1} << 63) | next_release_id_++;
  (void)submissions_.Push(r, Deadline::After(std::chrono::seconds(5)));
}

std::shared_ptr<HandleState> ClientCore::Take(uint64_t op_id) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  auto it = pending_.find(op_id);
  if (it == pending_.end()) return nullptr;
  auto s = std::move(it->second);
  pending_.erase(it);
  return s;
}

ArenaBuffer ClientCore::Buffer(uint64_t offset, uint64_t bytes) {
  return ArenaBuffer(shared_from_this(), offset, bytes, arena_->client_heap().data() + offset);
}

std::optional<uint64_t> ClientCore::HeapOffsetOf(const void* data, uint64_t bytes) {
  const std::span<std::byte> heap = arena_->client_heap();
  const auto p = reinterpret_cast<uintptr_t>(data);
  const auto base = reinterpret_cast<uintptr_t>(heap.data());
  if (bytes == 0 || p < base || p - base > heap.size() || bytes > heap.size() - (p - base)) {
    return std::nullopt;
  }
  return p - base;
}

std::vector<std::shared_ptr<HandleState>> ClientCore::TakeAll() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  std::vector<std::shared_ptr<HandleState>> out;
  for (auto& [id, s] : pending_) out.push_back(std::move(s));
  pending_.clear();
  return out;
}

// ---- ArenaBuffer ----

ArenaBuffer::ArenaBuffer(std::shared_ptr<ClientCore> core, uint64_t offset, uint64_t bytes,
                         std::byte* data)
    : core_(std::move(core)), offset_(offset), bytes_(bytes), data_(data) {}
ArenaBuffer::~ArenaBuffer() { Reset(); }
ArenaBuffer::ArenaBuffer(ArenaBuffer&& o) noexcept
    : core_(std::move(o.core_)), offset_(o.offset_), bytes_(o.bytes_), data_(o.data_) {
  o.core_ = nullptr;
}
ArenaBuffer& ArenaBuffer::operator=(ArenaBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    core_ = std::move(o.core_);
    o.core_ = nullptr;
    offset_ = o.offset_;
    bytes_ = o.bytes_;
    data_ = o.data_;
  }
  return *this;
}
void ArenaBuffer::Reset() {
  if (core_) (void)core_->heap().Free(offset_);
  core_ = nullptr;
}

// ---- ClientHandle ----

bool ClientHandle::Poll() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void ClientHandle::OnDone(std::function<void()> callback) const {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) {
      state_->on_done.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

Status ClientHandle::status() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return FailedPrecondition("op " + state_->name + " has not completed");
  return state_->status;
}

Status ClientHandle::Wait(Deadline deadline) const {
  return state_->core->WaitFor(*state_, deadline);  // every submitted handle has its core
}

const TensorShape& ClientHandle::shape() const { return state_->shape; }
std::span<const std::byte> ClientHandle::output() const { return state_->output; }
const std::vector<int64_t>& ClientHandle::received_splits() const { return state_->splits; }
int ClientHandle::last_joined_rank() const { return state_->last_joined_rank; }

// ---- Client ----

struct Client::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Sidecar::Stub> stub;
  v1::HelloReply hello;
  std::shared_ptr<ClientCore> core;
  std::atomic<bool> stop{false};
  std::thread completion_thread;
  std::atomic<int64_t> allocation_timeout_ms{kDefaultAllocationTimeout.count()};
  mutable std::mutex sets_mu;
  std::map<int, std::vector<int>> sets;  // process sets this client added: id -> ranks
  std::once_flag memory_once;
  std::unique_ptr<MemoryChannelClient> memory;  // SendDeviceMemory's, made on first use

  void RunCompletions();
  // Waits for heap space up to the allocation timeout (Client::Allocate).
  StatusOr<ArenaBuffer> Allocate(uint64_t bytes);

  // Op submission, once for both kinds of tensors (arena block or plain memory).
  struct Tensor;
  struct OpSpec;
  // The record and handle state of one op: its input placed (in the arena where it lies, or
  // staged), its output placed (the caller's arena range, the staging block, or a copy-out block).
  StatusOr<std::pair<SubmissionRecord, std::shared_ptr<HandleState>>> Prepare(const OpSpec& spec,
                                                                              const Tensor& in,
                                                                              const Tensor& out);
  StatusOr<ClientHandle> Run(const OpSpec& spec, const Tensor& in, const Tensor& out);
  StatusOr<uint64_t> PlaceInput(const OpSpec& spec, const Tensor& in, uint64_t bytes,
                                HandleState& state);
  StatusOr<uint64_t> PlaceOutput(const OpSpec& spec, const Tensor& in, uint64_t in_offset,
                                 const Tensor& out, uint64_t bytes, HandleState& state);
  StatusOr<ClientHandle> RunDevice(RecordOpType type, const DeviceTensorRef& in,
                                   const DeviceTensorRef& out, DataType dtype,
                                   const TensorShape& shape, const DeviceEventHandle* ready_event,
                                   const OpOptions& options, uint64_t output_bytes = 0,
                                   const std::vector<int64_t>& splits = {});
  StatusOr<ClientHandle> Submit(SubmissionRecord& r, std::shared_ptr<HandleState> state) {
    state->core = core;
    Status s = core->Submit(r, state);
    if (!s.ok()) return s;
    return ClientHandle(std::move(state));
  }
  grpc::ClientContext* Context(grpc::ClientContext& ctx, std::chrono::seconds timeout) {
    ctx.set_deadline(std::chrono::system_clock::now() + timeout);
    return &ctx;
  }
};

void Client::Impl::RunCompletions() {
  while (!stop.load()) {
    if (core->finished()) {  // nothing more will come
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (core->waiters_active()) {
      core->StandAside(std::chrono::milliseconds(2));
      continue;
    }
    std::lock_guard<std::timed_mutex> lock(core->poll_mu());
    // Cleared before looking for waiters: a waiter that comes later sets it after this (seq_cst),
    // so Pop sees it.
    core->reader_interrupt().store(false);
    if (core->direct_waiters() > 0) continue;
    (void)core->PollOnce(Deadline::After(std::chrono::milliseconds(100)),
                         &core->reader_interrupt());
  }
}

bool ClientCore::PollOnce(Deadline deadline, const std::atomic<bool>* interrupt) {
  CompletionQueue& q = completions_;
  CompletionRecord c;
  Status s = q.Pop(&c, deadline, interrupt);
  if (s.ok()) {
    Complete(c);
    while (q.TryPop(&c)) Complete(c);
    return true;
  }
  bool over = s.code() == StatusCode::kAborted || s.code() == StatusCode::kUnavailable;
  if (over) {
    s = s.WithContext("sidecar arena " + arena().name());
  } else if (s.code() == StatusCode::kDeadlineExceeded) {
    // Quiet for a poll slice: is the sidecar still there and running? However it died, the
    // kernel freed its lock on the arena; a stopped one's heartbeat stands still.
    Status alive = arena().CheckSidecar(unresponsive_after_);
    if (alive.ok()) return true;
    // It may have pushed its last completions right before it went: read them first.
    while (q.TryPop(&c)) Complete(c);
    s = std::move(alive);
    over = true;
  }
  if (over) {
    // Nothing more will come: later submissions fail at once with the same cause.
    std::lock_guard<std::mutex> lock(pending_mu_);
    if (failure_.ok()) failure_ = s;
    finished_.store(true, std::memory_order_release);
  }
  for (auto& st : TakeAll()) st->Finish(s);
  return !over;
}

bool ClientCore::waiters_active() const {
  if (direct_waiters() > 0) return true;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return now - last_waiter_left_ns_.load() < 5'000'000;  // 5 ms
}

void ClientCore::StandAside(std::chrono::milliseconds slice) { std::this_thread::sleep_for(slice); }

Status ClientCore::WaitFor(HandleState& st, Deadline deadline) {
  direct_waiters_.fetch_add(1);
  Status result;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.done) {
        result = st.status;
        break;
      }
    }
    if (deadline.Expired()) {
      result = DeadlineExceeded("op " + st.name + " did not complete before the deadline");
      break;
    }
    const auto slice = std::chrono::milliseconds(std::min(deadline.RemainingMs(), 100));
    if (finished()) {  // every pending op has failed or is about to: no one polls any more
      std::unique_lock<std::mutex> lock(st.mu);
      st.cv.wait_for(lock, slice, [&] { return st.done; });
      continue;
    }
    if (!poll_mu_.try_lock()) {
      // The completion thread may be asleep in Pop: it stands aside once woken. Another waiter
      // may be polling: it lets go after each batch it completes, ours included.
      reader_interrupt_.store(true);
      completions_.WakeConsumer();
      if (!poll_mu_.try_lock_for(slice)) continue;
    }
    std::lock_guard<std::timed_mutex> poll(poll_mu_, std::adopt_lock);
    {
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.done) continue;
    }
    (void)PollOnce(Deadline::After(slice), nullptr);
  }
  last_waiter_left_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
  direct_waiters_.fetch_sub(1);
  return result;
}

void ClientCore::Complete(const CompletionRecord& c) {
  auto state = Take(c.op_id);
  if (state == nullptr) return;
  Status s = ValidateCompletion(c, arena_->layout());
  if (s.ok()) s = StatusOf(c);
  if (!s.ok()) {
    // Answered: the sidecar no longer reads or writes them.
    state->staging_in = ArenaBuffer();
    state->staging_out = ArenaBuffer();
    state->Finish(std::move(s));
    return;
  }
  Arena& arena = *arena_;
  const bool in_results = (c.flags & kCompleteOutputInResultHeap) != 0;
  std::byte* base = in_results ? arena.result_heap().data() : arena.client_heap().data();
  state->shape.assign(c.dims, c.dims + c.ndims);
  state->output = {base + c.output_offset, c.output_bytes};
  if (in_results) {
    state->result_block = true;
    state->result_offset = c.output_offset;
  }
  if (c.flags & kCompleteSplitsInResultHeap) {
    const auto* p =
        reinterpret_cast<const int64_t*>(arena.result_heap().data() + c.received_splits_offset);
    state->splits.assign(p, p + c.num_received_splits);
    Release(c.received_splits_offset);
  } else {
    state->splits.assign(c.received_splits, c.received_splits + c.num_received_splits);
  }
  state->last_joined_rank = c.last_joined_rank;
  if (state->copy_out != nullptr) {
    const uint64_t n = std::min<uint64_t>(state->copy_bytes, state->output.size());
    std::memcpy(state->copy_out, state->output.data(), n);
    CountStagedOut(n);
    state->output = {static_cast<const std::byte*>(state->copy_out), n};
  }
  // The sidecar is done with the staging blocks: give the space back now rather than when the
  // caller gets round to the handle.
  state->staging_in = ArenaBuffer();
  state->staging_out = ArenaBuffer();
  state->Finish(OkStatus());
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  impl_->stop.store(true);
  if (impl_->completion_thread.joinable()) impl_->completion_thread.join();
  for (auto& st : impl_->core->TakeAll()) st->Finish(Aborted("the client was closed"));
}

StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& socket_path,
                                                  std::chrono::milliseconds timeout,
                                                  const std::string& client_name) {
  auto impl = std::make_unique<Impl>();
  impl->channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  impl->stub = v1::Sidecar::NewStub(impl->channel);
  v1::HelloRequest req;
  req.set_protocol_version(kSidecarProtocolVersion);
  req.set_client_pid(static_cast<int32_t>(::getpid()));
  req.set_client_name(client_name);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  ctx.set_wait_for_ready(true);
  grpc::Status gs = impl->stub->Hello(&ctx, req, &impl->hello);
  if (!gs.ok()) {
    return FromGrpcStatus(gs).WithContext("Hello to the sidecar at " + socket_path);
  }
  auto arena = Arena::Open(impl->hello.arena_name());
  if (!arena.ok()) return arena.status();
  // A sidecar that predates the field: its default op timeout.
  const auto unresponsive_after = std::chrono::milliseconds(
      impl->hello.op_timeout_ms() > 0 ? impl->hello.op_timeout_ms() : 60000);
  impl->core = std::make_shared<ClientCore>(std::move(*arena), unresponsive_after);
  Impl* raw = impl.get();
  impl->completion_thread = std::thread([raw] { raw->RunCompletions(); });
  return std::make_unique<Client>(std::move(impl));
}

int Client::rank() const { return impl_->hello.rank(); }
int Client::size() const { return impl_->hello.size(); }
int Client::local_rank() const { return impl_->hello.local_rank(); }
int Client::local_size() const { return impl_->hello.local_size(); }
int Client::cross_rank() const { return impl_->hello.cross_rank(); }
int Client::cross_size() const { return impl_->hello.cross_size(); }
const std::string& Client::session_id() const { return impl_->hello.session_id(); }
uint32_t Client::epoch() const { return impl_->hello.epoch(); }
const std::string& Client::device_backend() const { return impl_->hello.device_backend(); }
int Client::nccl_version() const { return impl_->hello.nccl_version(); }

Status Client::SendDeviceMemory(const std::vector<MemoryExport>& exports,
                                std::span<const int> fds) {
  std::call_once(impl_->memory_once, [this] {
    impl_->memory = std::make_unique<MemoryChannelClient>(impl_->hello.memory_socket(),
                                                          impl_->hello.memory_token());
  });
  const uint32_t ms = impl_->hello.op_timeout_ms() != 0 ? impl_->hello.op_timeout_ms() : 60000;
  return impl_->memory->Send(exports, fds, Deadline::After(std::chrono::milliseconds(ms)));
}

void Client::set_allocation_timeout(std::chrono::milliseconds timeout) {
  impl_->allocation_timeout_ms.store(timeout.count());
}

StatusOr<ArenaBuffer> Client::Impl::Allocate(uint64_t bytes) {
  auto allocated = core->heap().AllocateWaiting(
      bytes, Deadline::After(std::chrono::milliseconds(allocation_timeout_ms.load())));
  if (!allocated.ok()) {
    return Status(allocated.status().code(),
                  allocated.status().message() +
                      " (the sidecar's KOROVOD_ARENA_HEAP_MAX_MIB bounds the heap, /dev/shm "
                      "bounds its growth)");
  }
  return core->Buffer(*allocated, bytes);
}

StatusOr<ArenaBuffer> Client::Allocate(uint64_t bytes) { return impl_->Allocate(bytes); }

StatusOr<ArenaBuffer> Client::TryAllocate(uint64_t bytes, uint64_t keep_free_bytes) {
  HeapAllocator& heap = impl_->core->heap();
  const uint64_t capacity = heap.capacity();
  if (keep_free_bytes > capacity || bytes > capacity - keep_free_bytes ||
      heap.stats().used_bytes > capacity - keep_free_bytes - bytes) {
    return Unavailable("client heap of arena " + impl_->core->arena().name() + ": a block of " +
                       std::to_string(bytes) + " bytes would leave less than " +
                       std::to_string(keep_free_bytes) + " bytes free");
  }
  KV_ASSIGN_OR_RETURN(uint64_t off, heap.Allocate(bytes));
  return impl_->core->Buffer(off, bytes);
}

uint64_t Client::client_heap_capacity() const { return impl_->core->heap().capacity(); }

bool Client::InArena(const void* data, uint64_t bytes) const {
  return impl_->core->HeapOffsetOf(data, bytes).has_value();
}

ClientCopyStats Client::copy_stats() const { return impl_->core->copy_stats(); }

namespace {

StatusOr<SubmissionRecord> BaseRecord(RecordOpType type, DataType dtype, const TensorShape& shape,
                                      const OpOptions& o) {
  SubmissionRecord r{};
  r.kind = RecordKind::kOp;
  r.op_type = type;
  r.dtype = dtype;
  r.reduce_op = ToRecordReduceOp(o.reduce_op);
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return InvalidArgument("tensor " + o.name + " has more than " + std::to_string(kMaxDims) +
                           " dimensions");
  }
  r.ndims = static_cast<uint8_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) r.dims[i] = shape[i];
  r.root = o.root;
  r.process_set = o.process_set;
  r.prescale = o.prescale;
  r.postscale = o.postscale;
  KV_RETURN_IF_ERROR(SetName(r, o.name));
  return r;
}

uint64_t BytesOf(DataType dtype, const TensorShape& shape) {
  return static_cast<uint64_t>(NumElements(shape)) * DataTypeSize(dtype);
}

Status CheckBuffer(const ArenaBuffer& b, uint64_t bytes, const std::string& what) {
  if (!b.valid()) return InvalidArgument(what + " is not an arena buffer");
  if (b.size() < bytes) {
    return InvalidArgument(what + " holds " + std::to_string(b.size()) +
                           " bytes, the tensor needs " + std::to_string(bytes));
  }
  return OkStatus();
}

// Where an op's output goes: the shape of ops that reduce or broadcast is the input's, so the
// output is a client-heap range of the input's size; the others learn theirs in the engine and
// write it to the sidecar's result heap.
enum class OutputPlace { kNone, kInputShaped, kResultHeap };

OutputPlace PlaceOf(RecordOpType type) {
  switch (type) {
    case RecordOpType::kAllreduce:
    case RecordOpType::kBroadcast:
      return OutputPlace::kInputShaped;
    case RecordOpType::kAllgather:
    case RecordOpType::kAlltoall:
    case RecordOpType::kReduceScatter:
      return OutputPlace::kResultHeap;
    default:
      return OutputPlace::kNone;
  }
}

}  // namespace

// One tensor as the caller named it: an arena block it holds, or plain memory (which may itself
// lie in the client heap). The two variants of every op differ only in this, so everything past
// it is written once.
struct Client::Impl::Tensor {
  const ArenaBuffer* buffer = nullptr;
  const void* data = nullptr;
};

// The description of one op, as the public entry points give it.
struct Client::Impl::OpSpec {
  RecordOpType type;
  DataType dtype;
  const TensorShape& shape;
  const std::vector<int64_t>& splits;
  const OpOptions& options;
};

StatusOr<uint64_t> Client::Impl::PlaceInput(const OpSpec& spec, const Tensor& in, uint64_t bytes,
                                            HandleState& state) {
  const std::string what = std::string(RecordOpTypeName(spec.type)) + " " +
                           (spec.options.name.empty() ? "(unnamed)" : spec.options.name);
  if (in.buffer != nullptr) {
    KV_RETURN_IF_ERROR(CheckBuffer(*in.buffer, bytes, what + " input"));
    core->CountArenaTensor();
    return in.buffer->offset();
  }
  if (auto off = core->HeapOffsetOf(in.data, bytes)) {
    core->CountArenaTensor();
    return *off;
  }
  auto staging = Allocate(bytes);
  if (!staging.ok()) {
    return Status(staging.status().code(),
                  what + " of " + std::to_string(bytes) + " bytes: " + staging.status().message());
  }
  state.staging_in = std::move(*staging);
  if (bytes > 0) std::memcpy(state.staging_in.data(), in.data, bytes);
  core->CountStagedIn(bytes);
  return state.staging_in.offset();
}

StatusOr<uint64_t> Client::Impl::PlaceOutput(const OpSpec& spec, const Tensor& in,
                                             uint64_t in_offset, const Tensor& out, uint64_t bytes,
                                             HandleState& state) {
  if (out.buffer != nullptr) {
    KV_RETURN_IF_ERROR(
        CheckBuffer(*out.buffer, bytes, std::string(RecordOpTypeName(spec.type)) + " output"));
    return out.buffer->offset();
  }
  const bool staged_in = state.staging_in.valid();
  if (!staged_in && out.data == in.data) return in_offset;  // in place, in the arena
  if (auto off = core->HeapOffsetOf(out.data, bytes)) return *off;
  // Plain memory: the op writes an arena range, copied out on completion. A staged input's
  // block is private to this op, so the op runs in place there rather than in a second block.
  state.copy_out = const_cast<void*>(out.data);
  state.copy_bytes = bytes;
  if (staged_in) return in_offset;
  KV_ASSIGN_OR_RETURN(state.staging_out, Allocate(bytes));
  return state.staging_out.offset();
}

StatusOr<std::pair<SubmissionRecord, std::shared_ptr<HandleState>>> Client::Impl::Prepare(
    const OpSpec& spec, const Tensor& in, const Tensor& out) {
  KV_ASSIGN_OR_RETURN(SubmissionRecord r,
                      BaseRecord(spec.type, spec.dtype, spec.shape, spec.options));
  auto state = std::make_shared<HandleState>();
  const OutputPlace place = PlaceOf(spec.type);
  if (place == OutputPlace::kNone) return std::make_pair(r, std::move(state));
  const uint64_t bytes = BytesOf(spec.dtype, spec.shape);
  KV_ASSIGN_OR_RETURN(r.input_offset, PlaceInput(spec, in, bytes, *state));
  r.input_bytes = bytes;
  if (place == OutputPlace::kInputShaped) {
    KV_ASSIGN_OR_RETURN(r.output_offset, PlaceOutput(spec, in, r.input_offset, out, bytes, *state));
    r.output_bytes = bytes;
  } else {
    r.flags = kSubmitOutputInResultHeap;
    if (spec.splits.size() > static_cast<size_t>(kMaxInlineSplits)) {
      return Status(StatusCode::kUnimplemented, "more than 64 alltoall splits");
    }
    r.num_splits = static_cast<uint32_t>(spec.splits.size());
    for (size_t i = 0; i < spec.splits.size(); ++i) r.splits[i] = spec.splits[i];
  }
  return std::make_pair(r, std::move(state));
}

StatusOr<ClientHandle> Client::Impl::Run(const OpSpec& spec, const Tensor& in, const Tensor& out) {
  KV_ASSIGN_OR_RETURN(auto prepared, Prepare(spec, in, out));
  return Submit(prepared.first, std::move(prepared.second));
}

namespace {
const std::vector<int64_t> kNoSplits;
const TensorShape kScalarShape;
}  // namespace

StatusOr<ClientHandle> Client::Allreduce(const ArenaBuffer& input, const ArenaBuffer& output,
                                         DataType dtype, const TensorShape& shape,
                                         const OpOptions& options) {
  return impl_->Run({RecordOpType::kAllreduce, dtype, shape, kNoSplits, options}, {&input},
                    {&output});
}

StatusOr<ClientHandle> Client::Allgather(const ArenaBuffer& input, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return impl_->Run({RecordOpType::kAllgather, dtype, shape, kNoSplits, options}, {&input}, {});
}

StatusOr<ClientHandle> Client::Broadcast(const ArenaBuffer& tensor, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return impl_->Run({RecordOpType::kBroadcast, dtype, shape, kNoSplits, options}, {&tensor},
                    {&tensor});
}

StatusOr<ClientHandle> Client::Alltoall(const ArenaBuffer& input, DataType dtype,
                                        const TensorShape& shape,
                                        const std::vector<int64_t>& splits,
                                        const OpOptions& options) {
  return impl_->Run({RecordOpType::kAlltoall, dtype, shape, splits, options}, {&input}, {});
}

StatusOr<ClientHandle> Client::ReduceScatter(const ArenaBuffer& input, DataType dtype,
                                             const TensorShape& shape, const OpOptions& options) {
  return impl_->Run({RecordOpType::kReduceScatter, dtype, shape, kNoSplits, options}, {&input}, {});
}

StatusOr<ClientHandle> Client::Allreduce(const void* input, void* output, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return impl_->Run({RecordOpType::kAllreduce, dtype, shape, kNoSplits, options}, {nullptr, input},
                    {nullptr, output});
}

StatusOr<ClientHandle> Client::Broadcast(void* tensor, DataType dtype, const TensorShape& shape,
                                         const OpOptions& options) {
  return impl_->Run({RecordOpType::kBroadcast, dtype, shape, kNoSplits, options}, {nullptr, tensor},
                    {nullptr, tensor});
}

StatusOr<ClientHandle> Client::Allgather(const void* input, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return impl_->Run({RecordOpType::kAllgather, dtype, shape, kNoSplits, options}, {nullptr, input},
                    {});
}

StatusOr<ClientHandle> Client::Alltoall(const void* input, DataType dtype, const TensorShape& shape,
                                        const std::vector<int64_t>& splits,
                                        const OpOptions& options) {
  return impl_->Run({RecordOpType::kAlltoall, dtype, shape, splits, options}, {nullptr, input}, {});
}

StatusOr<ClientHandle> Client::ReduceScatter(const void* input, DataType dtype,
                                             const TensorShape& shape, const OpOptions& options) {
  return impl_->Run({RecordOpType::kReduceScatter, dtype, shape, kNoSplits, options},
                    {nullptr, input}, {});
}

StatusOr<std::vector<ClientHandle>> Client::GroupedAllreduce(
    const std::vector<GroupTensor>& tensors, DataType dtype, const OpOptions& options) {
  // One group in the submission queue: the sidecar hands the members to the engine together, so
  // they are negotiated and fused as one (and fail as one).
  if (tensors.empty()) return InvalidArgument("grouped allreduce of no tensors");
  if (tensors.size() > kMaxGroupSize) {
    return InvalidArgument("grouped allreduce of " + std::to_string(tensors.size()) +
                           " tensors (at most " + std::to_string(kMaxGroupSize) + ")");
  }
  std::vector<SubmissionRecord> records;
  std::vector<std::shared_ptr<HandleState>> states;
  for (size_t i = 0; i < tensors.size(); ++i) {
    OpOptions o = options;
    o.name = tensors[i].name.empty()
                 ? (options.name.empty() ? std::string() : options.name + "." + std::to_string(i))
                 : tensors[i].name;
    KV_ASSIGN_OR_RETURN(
        auto prepared,
        impl_->Prepare({RecordOpType::kAllreduce, dtype, tensors[i].shape, kNoSplits, o},
                       {nullptr, tensors[i].input}, {nullptr, tensors[i].output}));
    records.push_back(prepared.first);
    prepared.second->core = impl_->core;
    states.push_back(std::move(prepared.second));
  }
  KV_RETURN_IF_ERROR(impl_->core->SubmitGroup(records, states));
  std::vector<ClientHandle> handles;
  for (auto& st : states) handles.emplace_back(std::move(st));
  return handles;
}

namespace {

DeviceBufferRecord DeviceBuffer(const DeviceTensorRef& t) {
  DeviceBufferRecord b{};
  std::memcpy(b.mem_handle, t.mem_handle.data(), sizeof(b.mem_handle));
  b.allocation_base = t.allocation_base;
  b.allocation_bytes = t.allocation_bytes;
  b.offset = t.offset;
  b.handle_kind = t.handle_kind;
  return b;
}

}  // namespace

// The record names a descriptor in a client-heap block that lives as long as the op.
StatusOr<ClientHandle> Client::Impl::RunDevice(RecordOpType type, const DeviceTensorRef& in,
                                               const DeviceTensorRef& out, DataType dtype,
                                               const TensorShape& shape,
                                               const DeviceEventHandle* ready_event,
                                               const OpOptions& options, uint64_t output_bytes,
                                               const std::vector<int64_t>& splits) {
  if (in.device_uuid != out.device_uuid) {
    return InvalidArgument(std::string(RecordOpTypeName(type)) + " " + options.name +
                           ": input and output are on different devices");
  }
  KV_ASSIGN_OR_RETURN(SubmissionRecord r, BaseRecord(type, dtype, shape, options));
  auto state = std::make_shared<HandleState>();
  KV_ASSIGN_OR_RETURN(state->staging_in, Allocate(sizeof(DeviceTensorDescriptor)));
  DeviceTensorDescriptor d{};
  std::memcpy(d.device_uuid, in.device_uuid.data(), sizeof(d.device_uuid));
  if (ready_event != nullptr) {
    d.flags |= kDeviceReadyEvent;
    std::memcpy(d.event_handle, ready_event->data(), sizeof(d.event_handle));
  }
  d.input = DeviceBuffer(in);
  d.output = DeviceBuffer(out);
  std::memcpy(state->staging_in.data(), &d, sizeof d);
  r.flags = kSubmitDeviceTensor;
  r.input_offset = state->staging_in.offset();
  r.input_bytes = BytesOf(dtype, shape);
  r.output_bytes = output_bytes;
  if (splits.size() > static_cast<size_t>(kMaxInlineSplits)) {
    return Status(StatusCode::kUnimplemented, "more than 64 alltoall splits");
  }
  r.num_splits = static_cast<uint32_t>(splits.size());
  for (size_t i = 0; i < splits.size(); ++i) r.splits[i] = splits[i];
  return Submit(r, std::move(state));
}

StatusOr<ClientHandle> Client::DeviceAllreduce(const DeviceTensorRef& input,
                                               const DeviceTensorRef& output, DataType dtype,
                                               const TensorShape& shape,
                                               const DeviceEventHandle* ready_event,
                                               const OpOptions& options) {
  return impl_->RunDevice(RecordOpType::kAllreduce, input, output, dtype, shape, ready_event,
                          options);
}

StatusOr<ClientHandle> Client::DeviceBroadcast(const DeviceTensorRef& tensor, DataType dtype,
                                               const TensorShape& shape,
                                               const DeviceEventHandle* ready_event,
                                               const OpOptions& options) {
  return impl_->RunDevice(RecordOpType::kBroadcast, tensor, tensor, dtype, shape, ready_event,
                          options);
}

StatusOr<ClientHandle> Client::DeviceAllgather(const DeviceTensorRef& input,
                                               const DeviceTensorRef& output, uint64_t output_bytes,
                                               DataType dtype, const TensorShape& shape,
                                               const DeviceEventHandle* ready_event,
                                               const OpOptions& options) {
  return impl_->RunDevice(RecordOpType::kAllgather, input, output, dtype, shape, ready_event,
                          options, output_bytes);
}

StatusOr<ClientHandle> Client::DeviceAlltoall(const DeviceTensorRef& input,
                                              const DeviceTensorRef& output, uint64_t output_bytes,
                                              DataType dtype, const TensorShape& shape,
                                              const std::vector<int64_t>& splits,
                                              const DeviceEventHandle* ready_event,
                                              const OpOptions& options) {
  return impl_->RunDevice(RecordOpType::kAlltoall, input, output, dtype, shape, ready_event,
                          options, output_bytes, splits);
}

StatusOr<ClientHandle> Client::DeviceReduceScatter(const DeviceTensorRef& input,
                                                   const DeviceTensorRef& output,
                                                   uint64_t output_bytes, DataType dtype,
                                                   const TensorShape& shape,
                                                   const DeviceEventHandle* ready_event,
                                                   const OpOptions& options) {
  return impl_->RunDevice(RecordOpType::kReduceScatter, input, output, dtype, shape, ready_event,
                          options, output_bytes);
}

StatusOr<ClientHandle> Client::Barrier(const OpOptions& options) {
  return impl_->Run({RecordOpType::kBarrier, DataType::kUint8, kScalarShape, kNoSplits, options},
                    {}, {});
}

StatusOr<ClientHandle> Client::Join(const OpOptions& options) {
  return impl_->Run({RecordOpType::kJoin, DataType::kUint8, kScalarShape, kNoSplits, options}, {},
                    {});
}

StatusOr<int> Client::AddProcessSet(const std::vector<int>& ranks) {
  v1::AddProcessSetRequest req;
  for (int r : ranks) req.add_ranks(r);
  v1::AddProcessSetReply reply;
  grpc::ClientContext ctx;
  grpc::Status s =
      impl_->stub->AddProcessSet(impl_->Context(ctx, std::chrono::seconds(300)), req, &reply);
  if (!s.ok()) return FromGrpcStatus(s);
  std::vector<int> sorted(ranks);
  std::sort(sorted.begin(), sorted.end());
  std::lock_guard<std::mutex> lock(impl_->sets_mu);
  impl_->sets[reply.id()] = std::move(sorted);
  return reply.id();
}

StatusOr<bool> Client::RemoveProcessSet(int id) {
  v1::RemoveProcessSetRequest req;
  req.set_id(id);
  v1::RemoveProcessSetReply reply;
  grpc::ClientContext ctx;
  grpc::Status s =
      impl_->stub->RemoveProcessSet(impl_->Context(ctx, std::chrono::seconds(300)), req, &reply);
  if (!s.ok()) return FromGrpcStatus(s);
  std::lock_guard<std::mutex> lock(impl_->sets_mu);
  impl_->sets.erase(id);
  return reply.removed();
}

StatusOr<Client::SetPosition> Client::ProcessSetPosition(int id) const {
  if (id == 0) return SetPosition{rank(), size()};
  std::lock_guard<std::mutex> lock(impl_->sets_mu);
  const auto it = impl_->sets.find(id);
  if (it == impl_->sets.end()) {
    return Status(StatusCode::kInvalidArgument,
                  "process set " + std::to_string(id) + " is not registered by this client");
  }
  const auto at = std::find(it->second.begin(), it->second.end(), rank());
  if (at == it->second.end()) {
    return Status(StatusCode::kInvalidArgument, "rank " + std::to_string(rank()) +
                                                    " is not in process set " + std::to_string(id));
  }
  return SetPosition{static_cast<int>(at - it->second.begin()),
                     static_cast<int>(it->second.size())};
}

Status Client::StartTimeline(const std::string& path, bool mark_cycles) {
  v1::StartTimelineRequest req;
  req.set_path(path);
  req.set_mark_cycles(mark_cycles);
  v1::StartTimelineReply reply;
  grpc::ClientContext ctx;
  return FromGrpcStatus(
      impl_->stub->StartTimeline(impl_->Context(ctx, std::chrono::seconds(30)), req, &reply));
}

Status Client::StopTimeline() {
  v1::StopTimelineRequest req;
  v1::StopTimelineReply reply;
  grpc::ClientContext ctx;
  return FromGrpcStatus(
      impl_->stub->StopTimeline(impl_->Context(ctx, std::chrono::seconds(30)), req, &reply));
}

StatusOr<EngineStats> Client::GetStats() {
  v1::GetStatsRequest req;
  v1::GetStatsReply reply;
  grpc::ClientContext ctx;
  grpc::Status s =
      impl_->stub->GetStats(impl_->Context(ctx, std::chrono::seconds(30)), req, &reply);
  if (!s.ok()) return FromGrpcStatus(s);
  const auto& p = reply.stats();
  EngineStats e;
  e.cycles = p.cycles();
  e.busy_cycles = p.busy_cycles();
  e.negotiation_ns = p.negotiation_ns();
  e.execution_ns = p.execution_ns();
  e.tensors = p.tensors();
  e.collectives = p.collectives();
  e.bytes = p.bytes();
  e.cache_hits = p.cache_hits();
  e.negotiated = p.negotiated();
  e.full_negotiations = p.full_negotiations();
  e.fusion_threshold_bytes = p.fusion_threshold_bytes();
  e.cycle_time_ms = p.cycle_time_ms();
  return e;
}

StatusOr<Client::Membership> Client::GetMembership() {
  v1::MembershipRequest req;
  v1::MembershipReply reply;
  grpc::ClientContext ctx;
  grpc::Status s =
      impl_->stub->Membership(impl_->Context(ctx, std::chrono::seconds(30)), req, &reply);
  if (!s.ok()) return FromGrpcStatus(s);
  Membership m;
  m.epoch = reply.epoch();
  m.formed_version = reply.formed_version();
  m.version = reply.version();
  m.update = reply.update();
  return m;
}

Status Client::Shutdown(const std::string& reason) {
  v1::ShutdownRequest req;
  req.set_reason(reason);
  v1::ShutdownReply reply;
  grpc::ClientContext ctx;
  return FromGrpcStatus(
      impl_->stub->Shutdown(impl_->Context(ctx, std::chrono::seconds(30)), req, &reply));
}

}  // namespace korovod::sidecar
