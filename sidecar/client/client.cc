#include "sidecar/client/client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "korovod/sidecar/v1/sidecar.grpc.pb.h"
#include "sidecar/arena/wire_mapping.h"
#include "sidecar/control/grpc_status.h"
#include "sidecar/control/protocol_version.h"
#include "sidecar/arena/arena.h"
#include "sidecar/arena/heap_allocator.h"
#include "sidecar/arena/op_queue.h"
#include "sidecar/arena/record_validation.h"

namespace korovod::sidecar {

// What the client's objects share: the arena, the client heap allocator, the submission queue.
class ClientCore {
 public:
  explicit ClientCore(std::unique_ptr<Arena> arena)
      : arena_(std::move(arena)),
        heap_(arena_->layout().client_heap.bytes, "client heap of arena " + arena_->name(),
              [a = arena_.get()](uint64_t end) { return a->Reserve(ArenaHeap::kClient, end); }),
        submissions_(*arena_),
        completions_(*arena_) {}

  Arena& arena() { return *arena_; }
  HeapAllocator& heap() { return heap_; }
  CompletionQueue& completions() { return completions_; }  // the completion thread only

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

  std::unique_ptr<Arena> arena_;
  HeapAllocator heap_;
  std::mutex submit_mu_;
  SubmissionQueue submissions_;
  uint64_t next_op_id_ = 1;
  uint64_t next_group_id_ = 1;
  uint64_t next_release_id_ = 1;
  CompletionQueue completions_;
  std::mutex pending_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<HandleState>> pending_;
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
  // Staging (plain-pointer ops): the output is copied out and the block freed on completion, so
  // a burst of ops never holds more of the heap than the ops still in flight.
  ArenaBuffer staging_in;
  void* copy_out = nullptr;
  uint64_t copy_bytes = 0;
  // A result-heap output, released when the handle goes.
  std::shared_ptr<ClientCore> core;
  bool result_block = false;
  uint64_t result_offset = 0;

  ~HandleState() {
    if (result_block && core) core->Release(result_offset);
  }
  void Finish(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  }
};

Status ClientCore::Register(SubmissionRecord& r, const std::shared_ptr<HandleState>& state) {
  r.op_id = next_op_id_++;
  if (r.name_len == 0) {
    KV_RETURN_IF_ERROR(
        SetName(r, std::string(WireOpTypeName(r.op_type)) + ".client" + std::to_string(r.op_id)));
  }
  state->name = std::string(NameOf(r));
  std::lock_guard<std::mutex> plock(pending_mu_);
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

Status ClientHandle::Wait(Deadline deadline) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  while (!state_->done) {
    if (deadline.Expired()) {
      return DeadlineExceeded("op " + state_->name + " did not complete before the deadline");
    }
    state_->cv.wait_for(lock, std::chrono::milliseconds(std::min(deadline.RemainingMs(), 100)));
  }
  return state_->status;
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

  void RunCompletions();
  void Complete(const CompletionRecord& c);
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
  CompletionQueue& q = core->completions();
  while (!stop.load()) {
    CompletionRecord c;
    Status s = q.Pop(&c, Deadline::After(std::chrono::milliseconds(100)));
    if (s.ok()) {
      Complete(c);
      continue;
    }
    if (s.code() == StatusCode::kDeadlineExceeded) {
      if (core->arena().peer_alive()) continue;
      // The sidecar may have pushed its last completions right before it went: read them first.
      while (q.TryPop(&c)) Complete(c);
      s = Unavailable("the sidecar has shut down");
    }
    for (auto& st : core->TakeAll())
      st->Finish(s.WithContext("sidecar arena " + core->arena().name()));
    if (s.code() == StatusCode::kAborted || s.code() == StatusCode::kUnavailable) {
      // The queue is closed: nothing more will come.
      while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
  }
}

void Client::Impl::Complete(const CompletionRecord& c) {
  auto state = core->Take(c.op_id);
  if (state == nullptr) return;
  Status s = ValidateCompletion(c, core->arena().layout());
  if (s.ok()) s = StatusOf(c);
  if (!s.ok()) {
    state->staging_in = ArenaBuffer();  // answered: the sidecar no longer reads or writes it
    state->Finish(std::move(s));
    return;
  }
  Arena& arena = core->arena();
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
    core->Release(c.received_splits_offset);
  } else {
    state->splits.assign(c.received_splits, c.received_splits + c.num_received_splits);
  }
  state->last_joined_rank = c.last_joined_rank;
  if (state->copy_out != nullptr) {
    const uint64_t n = std::min<uint64_t>(state->copy_bytes, state->output.size());
    std::memcpy(state->copy_out, state->output.data(), n);
    state->output = {static_cast<const std::byte*>(state->copy_out), n};
  }
  // The sidecar is done with the staged input (and in-place output): give the space back now
  // rather than when the caller gets round to the handle.
  state->staging_in = ArenaBuffer();
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
  impl->core = std::make_shared<ClientCore>(std::move(*arena));
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

void Client::set_allocation_timeout(std::chrono::milliseconds timeout) {
  impl_->allocation_timeout_ms.store(timeout.count());
}

StatusOr<ArenaBuffer> Client::Allocate(uint64_t bytes) {
  auto allocated = impl_->core->heap().AllocateWaiting(
      bytes, Deadline::After(std::chrono::milliseconds(impl_->allocation_timeout_ms.load())));
  if (!allocated.ok()) {
    return Status(allocated.status().code(),
                  allocated.status().message() +
                      " (the sidecar's KOROVOD_ARENA_HEAP_MAX_MIB bounds the heap, /dev/shm "
                      "bounds its growth)");
  }
  const uint64_t off = *allocated;
  return ArenaBuffer(impl_->core, off, bytes, impl_->core->arena().client_heap().data() + off);
}

namespace {

StatusOr<SubmissionRecord> BaseRecord(WireOpType type, DataType dtype, const TensorShape& shape,
                                      const OpOptions& o) {
  SubmissionRecord r{};
  r.kind = RecordKind::kOp;
  r.op_type = type;
  r.dtype = dtype;
  r.reduce_op = ToWireReduceOp(o.reduce_op);
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

Status CheckBuffer(const ArenaBuffer& b, uint64_t bytes, const char* what) {
  if (!b.valid()) return InvalidArgument(std::string(what) + " is not an arena buffer");
  if (b.size() < bytes) {
    return InvalidArgument(std::string(what) + " holds " + std::to_string(b.size()) +
                           " bytes, the tensor needs " + std::to_string(bytes));
  }
  return OkStatus();
}

}  // namespace

StatusOr<ClientHandle> Client::Allreduce(const ArenaBuffer& input, const ArenaBuffer& output,
                                         DataType dtype, const TensorShape& shape,
                                         const OpOptions& options) {
  const uint64_t bytes = BytesOf(dtype, shape);
  KV_RETURN_IF_ERROR(CheckBuffer(input, bytes, "allreduce input"));
  KV_RETURN_IF_ERROR(CheckBuffer(output, bytes, "allreduce output"));
  KV_ASSIGN_OR_RETURN(SubmissionRecord r,
                      BaseRecord(WireOpType::kAllreduce, dtype, shape, options));
  r.input_offset = input.offset();
  r.input_bytes = bytes;
  r.output_offset = output.offset();
  r.output_bytes = bytes;
  return impl_->Submit(r, std::make_shared<HandleState>());
}

// Ops whose output goes to the result heap, from an arena input.
static StatusOr<ClientHandle> ResultHeapOp(Client::Impl& impl, WireOpType type,
                                           const ArenaBuffer& input, DataType dtype,
                                           const TensorShape& shape,
                                           const std::vector<int64_t>& splits,
                                           const OpOptions& options,
                                           std::shared_ptr<HandleState> state) {
  const uint64_t bytes = BytesOf(dtype, shape);
  KV_RETURN_IF_ERROR(CheckBuffer(input, bytes, WireOpTypeName(type)));
  KV_ASSIGN_OR_RETURN(SubmissionRecord r, BaseRecord(type, dtype, shape, options));
  r.input_offset = input.offset();
  r.input_bytes = bytes;
  r.flags = kSubmitOutputInResultHeap;
  if (splits.size() > static_cast<size_t>(kMaxInlineSplits)) {
    return Status(StatusCode::kUnimplemented, "more than 64 alltoall splits");
  }
  r.num_splits = static_cast<uint32_t>(splits.size());
  for (size_t i = 0; i < splits.size(); ++i) r.splits[i] = splits[i];
  return impl.Submit(r, std::move(state));
}

StatusOr<ClientHandle> Client::Allgather(const ArenaBuffer& input, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return ResultHeapOp(*impl_, WireOpType::kAllgather, input, dtype, shape, {}, options,
                      std::make_shared<HandleState>());
}

StatusOr<ClientHandle> Client::Broadcast(const ArenaBuffer& tensor, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  const uint64_t bytes = BytesOf(dtype, shape);
  KV_RETURN_IF_ERROR(CheckBuffer(tensor, bytes, "broadcast tensor"));
  KV_ASSIGN_OR_RETURN(SubmissionRecord r,
                      BaseRecord(WireOpType::kBroadcast, dtype, shape, options));
  r.input_offset = tensor.offset();
  r.input_bytes = bytes;
  r.output_offset = tensor.offset();
  r.output_bytes = bytes;
  return impl_->Submit(r, std::make_shared<HandleState>());
}

StatusOr<ClientHandle> Client::Alltoall(const ArenaBuffer& input, DataType dtype,
                                        const TensorShape& shape,
                                        const std::vector<int64_t>& splits,
                                        const OpOptions& options) {
  return ResultHeapOp(*impl_, WireOpType::kAlltoall, input, dtype, shape, splits, options,
                      std::make_shared<HandleState>());
}

StatusOr<ClientHandle> Client::ReduceScatter(const ArenaBuffer& input, DataType dtype,
                                             const TensorShape& shape, const OpOptions& options) {
  return ResultHeapOp(*impl_, WireOpType::kReduceScatter, input, dtype, shape, {}, options,
                      std::make_shared<HandleState>());
}

// A client-heap block holding a copy of `bytes` at `input`; an error names the tensor.
static StatusOr<ArenaBuffer> StageCopy(Client& client, WireOpType type, const std::string& name,
                                       const void* input, uint64_t bytes) {
  auto staging = client.Allocate(bytes);
  if (!staging.ok()) {
    return Status(staging.status().code(), std::string(WireOpTypeName(type)) + " " +
                                               (name.empty() ? std::string("(unnamed)") : name) +
                                               " of " + std::to_string(bytes) +
                                               " bytes: " + staging.status().message());
  }
  std::memcpy(staging->data(), input, bytes);
  return staging;
}

// Plain-pointer ops whose output has the input's shape: one copy into an arena block, the op in
// place there, and one copy out to `output` on completion. Returns the record to push and the
// handle state that owns the staging block.
static StatusOr<std::pair<SubmissionRecord, std::shared_ptr<HandleState>>> StageInPlace(
    Client& client, WireOpType type, const void* input, void* output, DataType dtype,
    const TensorShape& shape, const OpOptions& options) {
  const uint64_t bytes = BytesOf(dtype, shape);
  KV_ASSIGN_OR_RETURN(ArenaBuffer staging, StageCopy(client, type, options.name, input, bytes));
  KV_ASSIGN_OR_RETURN(SubmissionRecord r, BaseRecord(type, dtype, shape, options));
  r.input_offset = staging.offset();
  r.input_bytes = bytes;
  r.output_offset = staging.offset();
  r.output_bytes = bytes;
  auto state = std::make_shared<HandleState>();
  state->staging_in = std::move(staging);
  state->copy_out = output;
  state->copy_bytes = bytes;
  return std::make_pair(r, std::move(state));
}

static StatusOr<ClientHandle> StagedInPlaceOp(Client& client, Client::Impl& impl, WireOpType type,
                                              const void* input, void* output, DataType dtype,
                                              const TensorShape& shape, const OpOptions& options) {
  KV_ASSIGN_OR_RETURN(auto staged,
                      StageInPlace(client, type, input, output, dtype, shape, options));
  return impl.Submit(staged.first, std::move(staged.second));
}

StatusOr<ClientHandle> Client::Allreduce(const void* input, void* output, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return StagedInPlaceOp(*this, *impl_, WireOpType::kAllreduce, input, output, dtype, shape,
                         options);
}

StatusOr<ClientHandle> Client::Broadcast(void* tensor, DataType dtype, const TensorShape& shape,
                                         const OpOptions& options) {
  return StagedInPlaceOp(*this, *impl_, WireOpType::kBroadcast, tensor, tensor, dtype, shape,
                         options);
}

static StatusOr<ClientHandle> StagedResultHeapOp(Client& client, Client::Impl& impl,
                                                 WireOpType type, const void* input, DataType dtype,
                                                 const TensorShape& shape,
                                                 const std::vector<int64_t>& splits,
                                                 const OpOptions& options) {
  const uint64_t bytes = BytesOf(dtype, shape);
  KV_ASSIGN_OR_RETURN(ArenaBuffer staging, StageCopy(client, type, options.name, input, bytes));
  auto state = std::make_shared<HandleState>();
  const ArenaBuffer& in = state->staging_in = std::move(staging);
  return ResultHeapOp(impl, type, in, dtype, shape, splits, options, std::move(state));
}

StatusOr<ClientHandle> Client::Allgather(const void* input, DataType dtype,
                                         const TensorShape& shape, const OpOptions& options) {
  return StagedResultHeapOp(*this, *impl_, WireOpType::kAllgather, input, dtype, shape, {},
                            options);
}

StatusOr<ClientHandle> Client::Alltoall(const void* input, DataType dtype, const TensorShape& shape,
                                        const std::vector<int64_t>& splits,
                                        const OpOptions& options) {
  return StagedResultHeapOp(*this, *impl_, WireOpType::kAlltoall, input, dtype, shape, splits,
                            options);
}

StatusOr<ClientHandle> Client::ReduceScatter(const void* input, DataType dtype,
                                             const TensorShape& shape, const OpOptions& options) {
  return StagedResultHeapOp(*this, *impl_, WireOpType::kReduceScatter, input, dtype, shape, {},
                            options);
}

StatusOr<std::vector<ClientHandle>> Client::GroupedAllreduce(
    const std::vector<GroupTensor>& tensors, DataType dtype, const OpOptions& options) {
  // One group on the wire: the sidecar hands the members to the engine together, so they are
  // negotiated and fused as one (and fail as one).
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
    KV_ASSIGN_OR_RETURN(auto staged, StageInPlace(*this, WireOpType::kAllreduce, tensors[i].input,
                                                  tensors[i].output, dtype, tensors[i].shape, o));
    records.push_back(staged.first);
    staged.second->core = impl_->core;
    states.push_back(std::move(staged.second));
  }
  KV_RETURN_IF_ERROR(impl_->core->SubmitGroup(records, states));
  std::vector<ClientHandle> handles;
  for (auto& st : states) handles.emplace_back(std::move(st));
  return handles;
}

StatusOr<ClientHandle> Client::Barrier(const OpOptions& options) {
  KV_ASSIGN_OR_RETURN(SubmissionRecord r,
                      BaseRecord(WireOpType::kBarrier, DataType::kUint8, {}, options));
  return impl_->Submit(r, std::make_shared<HandleState>());
}

StatusOr<ClientHandle> Client::Join(const OpOptions& options) {
  KV_ASSIGN_OR_RETURN(SubmissionRecord r,
                      BaseRecord(WireOpType::kJoin, DataType::kUint8, {}, options));
  return impl_->Submit(r, std::make_shared<HandleState>());
}

StatusOr<int> Client::AddProcessSet(const std::vector<int>& ranks) {
  v1::AddProcessSetRequest req;
  for (int r : ranks) req.add_ranks(r);
  v1::AddProcessSetReply reply;
  grpc::ClientContext ctx;
  grpc::Status s =
      impl_->stub->AddProcessSet(impl_->Context(ctx, std::chrono::seconds(300)), req, &reply);
  if (!s.ok()) return FromGrpcStatus(s);
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
  return reply.removed();
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

Status Client::Shutdown(const std::string& reason) {
  v1::ShutdownRequest req;
  req.set_reason(reason);
  v1::ShutdownReply reply;
  grpc::ClientContext ctx;
  return FromGrpcStatus(
      impl_->stub->Shutdown(impl_->Context(ctx, std::chrono::seconds(30)), req, &reply));
}

}  // namespace korovod::sidecar
