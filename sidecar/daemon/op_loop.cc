#include "sidecar/daemon/op_loop.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "common/log.h"
#include "sidecar/arena/heap_allocator.h"
#include "sidecar/arena/op_queue.h"
#include "sidecar/arena/record_mapping.h"

namespace korovod::sidecar {

struct OpLoop::Session {
  Session(Arena& arena, DeviceApi* device, MemoryInbox* inbox, EngineMetrics* metrics)
      : metrics(metrics),
        submissions(arena),
        completions(arena),
        results(arena.layout().result_heap.bytes, "result heap of arena " + arena.name(),
                [&arena](uint64_t end) { return arena.Reserve(ArenaHeap::kResult, end); }),
        result_base(arena.result_heap().data()) {
    if (device != nullptr) device_handles = std::make_unique<DeviceHandleCache>(*device, inbox);
  }
  // The last reference goes with the session's last op: only then are its client's device
  // allocations closed (an op in flight may still be reading them).
  ~Session() {
    if (device_handles && metrics != nullptr) {
      metrics->RecordDeviceAllocations(-static_cast<double>(device_handles->open()), 0, 0);
    }
  }

  EngineMetrics* metrics;

  SubmissionQueue submissions;  // op loop thread only
  std::mutex mu;                // guards completions and alive
  CompletionQueue completions;
  bool alive = true;
  HeapAllocator results;
  std::byte* result_base;
  std::unique_ptr<DeviceHandleCache> device_handles;  // op loop thread only; null: no device

  // Pushes unless the session ended (its client is gone: the completion is discarded). A client
  // that reads nothing gets `wait` to make room.
  void Complete(const CompletionRecord& c,
                Deadline wait = Deadline::After(std::chrono::seconds(5))) {
    std::lock_guard<std::mutex> lock(mu);
    if (!alive) return;
    Status s = completions.Push(c, wait);
    if (!s.ok()) {
      KV_LOG(kWarning, kArena, "dropping completion of op %llu: %s",
             static_cast<unsigned long long>(c.op_id), s.ToString().c_str());
    }
  }
};

namespace {

void ResetQueue(QueueControl& q) {
  q.head.value.store(0, std::memory_order_relaxed);
  q.tail.value.store(0, std::memory_order_relaxed);
  q.consumer_waiting.value.store(0, std::memory_order_relaxed);
  q.producer_waiting.value.store(0, std::memory_order_relaxed);
  q.closed.value.store(0, std::memory_order_release);
}

// What one submitted op needs until its completion (engine thread only after Submit).
struct PendingOp {
  uint64_t op_id = 0;
  OpType type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  int32_t process_set = 0;
  uint64_t input_bytes = 0;
  TensorShape known_shape;  // output shape when known at submission
  bool output_in_result_heap = false;
  bool result_allocated = false;  // output_offset is a result-heap block we own
  uint64_t output_offset = 0;
  uint64_t output_bytes = 0;
  std::chrono::steady_clock::time_point start;
  std::shared_ptr<OpLoop::Session> session;
};

}  // namespace

OpLoop::OpLoop(Engine& engine, Arena& arena, EngineMetrics* metrics, DeviceApi* device,
               std::chrono::milliseconds ready_timeout, MemoryInbox* inbox)
    : engine_(engine),
      arena_(arena),
      metrics_(metrics),
      device_(device),
      ready_timeout_(ready_timeout),
      inbox_(inbox) {
  session_ = std::make_shared<Session>(arena_, device_, inbox_, metrics_);
}

OpLoop::~OpLoop() { Stop(); }

void OpLoop::Start() {
  thread_ = std::thread([this] { Run(); });
}

void OpLoop::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

Status OpLoop::WaitReadyForClient(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  // Ready: no client attached and the last one's queues were reset (a detaching client closes
  // them; EndSession reopens them).
  ArenaHeader& h = arena_.header();
  while (client_seen_ || h.client_alive.value.load(std::memory_order_acquire) != 0 ||
         h.submission.closed.value.load(std::memory_order_acquire) != 0 ||
         h.completion.closed.value.load(std::memory_order_acquire) != 0) {
    if (deadline.Expired()) {
      return FailedPrecondition("arena " + arena_.name() + " already has a client attached (pid " +
                                std::to_string(arena_.header().client_pid.value.load()) + ")");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  return OkStatus();
}

void OpLoop::ExpectClient(int pid) {
  const bool visible = pid > 0 && ::kill(pid, 0) == 0;
  std::lock_guard<std::mutex> lock(mu_);
  hello_pid_ = pid;
  hello_pid_visible_ = visible;
}

void OpLoop::Run() {
  auto next_check = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check) {
      arena_.Heartbeat();
      CheckClient();
      next_check = now + std::chrono::milliseconds(100);
    }
    SubmissionRecord record;
    Status s = session_->submissions.Pop(&record, Deadline::After(std::chrono::milliseconds(100)));
    if (s.ok()) {
      Handle(record);
    } else if (s.code() == StatusCode::kAborted) {
      // Closed: the client detached. Notice it soon.
      CheckClient();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else if (s.code() != StatusCode::kDeadlineExceeded) {
      KV_LOG(kError, kArena, "%s", s.ToString().c_str());
      EndSession("its submission queue is corrupt");
    }
  }
  Drain();
}

void OpLoop::Drain() {
  // Ops the loop will never submit are answered rather than left to the client's detection of a
  // dead sidecar: what is still in the submission queue, and members of incomplete groups.
  ArenaHeader& h = arena_.header();
  const Deadline until = Deadline::After(kDrainTimeout);
  auto attached = [&] { return h.client_alive.value.load(std::memory_order_acquire) != 0; };
  if (attached()) {
    const Status why = Aborted("korovod-sidecar rank " + std::to_string(engine_.rank()) +
                               " shut down before the op ran");
    SubmissionRecord record;
    while (session_->submissions.TryPop(&record)) {
      if (record.kind == RecordKind::kOp) Fail(record.op_id, why, until);
    }
    for (uint64_t id : groups_.HeldOpIds()) Fail(id, why, until);
  }
  groups_.Clear();
  // Completions pushed just before the arena closes are read by a live client only if it gets
  // to them first: a client that sees the sidecar gone fails what it is still waiting for. So an
  // attached client gets a bounded moment to read every completion.
  while (attached() &&
         h.completion.head.value.load(std::memory_order_acquire) !=
             h.completion.tail.value.load(std::memory_order_acquire) &&
         !until.Expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void OpLoop::CheckClient() {
  ArenaHeader& h = arena_.header();
  if (h.client_alive.value.load(std::memory_order_acquire) != 0) {
    const auto pid = static_cast<pid_t>(h.client_pid.value.load(std::memory_order_relaxed));
    if (pid <= 0) return;  // still attaching
    const bool gone = ::kill(pid, 0) != 0 && errno == ESRCH;
    if (!client_seen_) {
      // The pid is only meaningful when the client runs in our pid namespace (in a pod without
      // shareProcessNamespace it is not): use it only if it was visible when first seen.
      std::lock_guard<std::mutex> lock(mu_);
      client_seen_ = true;
      client_pid_visible_ = !gone || (pid == hello_pid_ && hello_pid_visible_);
      return;
    }
    if (client_pid_visible_ && gone) EndSession("its process exited");
  } else if (client_seen_ || h.submission.closed.value.load(std::memory_order_acquire) != 0 ||
             h.completion.closed.value.load(std::memory_order_acquire) != 0) {
    EndSession("it detached");
  }
}

void OpLoop::EndSession(const char* why) {
  {
    std::lock_guard<std::mutex> lock(session_->mu);
    session_->alive = false;
  }
  ArenaHeader& h = arena_.header();
  // Members of groups that never filled up never reached the engine: nothing else holds them.
  const size_t dropped = groups_.Clear();
  KV_LOG(kInfo, kArena, "client pid %u of arena %s is gone (%s); arena reset%s%s",
         h.client_pid.value.load(), arena_.name().c_str(), why,
         dropped > 0 ? ", incomplete grouped allreduces dropped: " : "",
         dropped > 0 ? std::to_string(dropped).c_str() : "");
  ResetQueue(h.submission);
  ResetQueue(h.completion);
  h.client_pid.value.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  session_ = std::make_shared<Session>(arena_, device_, inbox_, metrics_);
  client_seen_ = false;
  client_pid_visible_ = false;
  arena_.ReleaseClient();
  cv_.notify_all();
}

void OpLoop::Fail(uint64_t op_id, const Status& s, Deadline wait) {
  CompletionRecord c{};
  c.op_id = op_id;
  SetStatus(c, s);
  session_->Complete(c, wait);
}

// The end of the client-heap bytes `op` makes the sidecar touch (0 for none).
static uint64_t ClientHeapEnd(const ValidatedOp& op) {
  uint64_t end = op.input.bytes > 0 ? op.input.offset + op.input.bytes : 0;
  if (!op.output_in_result_heap && op.output.bytes > 0) {
    end = std::max(end, op.output.offset + op.output.bytes);
  }
  return end;
}

void OpLoop::Handle(const SubmissionRecord& record) {
  // The heap grows: before touching a client range, make sure /dev/shm backs it (the client
  // reserved it when it allocated, unless it is buggy or hostile; then this is its error, not
  // this process's SIGBUS). Splits stored in the heap are read during validation.
  const uint64_t heap_bytes = arena_.layout().client_heap.bytes;
  if (record.kind == RecordKind::kOp && record.num_splits > kMaxInlineSplits &&
      record.num_splits <= kMaxSplits && record.splits_offset <= heap_bytes &&
      uint64_t{record.num_splits} * sizeof(int64_t) <= heap_bytes - record.splits_offset) {
    Status s = arena_.Reserve(ArenaHeap::kClient,
                              record.splits_offset + uint64_t{record.num_splits} * sizeof(int64_t));
    if (!s.ok()) {
      Fail(record.op_id, s);
      return;
    }
  }
  if (record.kind == RecordKind::kOp && (record.flags & kSubmitDeviceTensor) != 0 &&
      record.input_offset <= heap_bytes &&
      sizeof(DeviceTensorDescriptor) <= heap_bytes - record.input_offset) {
    Status s =
        arena_.Reserve(ArenaHeap::kClient, record.input_offset + sizeof(DeviceTensorDescriptor));
    if (!s.ok()) {
      Fail(record.op_id, s);
      return;
    }
  }
  auto op = ValidateSubmission(record, arena_.layout(), arena_.client_heap());
  if (op.ok() && op->kind == RecordKind::kOp) {
    Status s = arena_.Reserve(ArenaHeap::kClient, ClientHeapEnd(*op));
    if (!s.ok()) op = s;
  }
  if (!op.ok()) {
    Fail(record.op_id, op.status());
    // A refused member still counts toward its group, so that the others fail instead of waiting
    // for it. The raw group fields are plain integers, range-checked here.
    if (record.kind == RecordKind::kOp && record.group_size > 1 &&
        record.group_size <= kMaxGroupSize) {
      Apply(groups_.AddRefused(record.op_id, record.group_id, record.group_size, op.status()));
    }
    return;
  }
  if (op->kind == RecordKind::kReleaseResult) {
    Status s = session_->results.Free(op->release_offset);
    if (!s.ok()) KV_LOG(kError, kArena, "release: %s", s.ToString().c_str());
    return;
  }
  if (op->group_size > 1) {
    Apply(groups_.Add(std::move(*op)));
    return;
  }
  Status s = SubmitOp(*op);
  if (!s.ok()) Fail(op->op_id, s);
}

void OpLoop::Apply(GroupAssembler::Outcome outcome) {
  for (uint64_t id : outcome.failed) Fail(id, outcome.error);
  if (!outcome.ready.empty()) SubmitGroup(std::move(outcome.ready));
}

struct OpLoop::Prepared {
  OpRequest req;
  DoneCallback done;
  std::shared_ptr<PendingOp> pending;
};

void OpLoop::Unprepare(Prepared& p) {
  if (p.pending->result_allocated) {
    (void)p.pending->session->results.Free(p.pending->output_offset);
    p.pending->result_allocated = false;
  }
}

Status OpLoop::SubmitOp(const ValidatedOp& op) {
  KV_ASSIGN_OR_RETURN(Prepared p, Prepare(op));
  auto handle = engine_.Submit(std::move(p.req), std::move(p.done));
  if (!handle.ok()) {
    Unprepare(p);
    return handle.status();
  }
  return OkStatus();
}

void OpLoop::SubmitGroup(std::vector<ValidatedOp> ops) {
  std::vector<Prepared> prepared;
  Status s;
  for (const ValidatedOp& op : ops) {
    auto p = Prepare(op);
    if (!p.ok()) {
      s = p.status();
      break;
    }
    prepared.push_back(std::move(*p));
  }
  if (s.ok()) {
    std::vector<OpRequest> reqs;
    std::vector<DoneCallback> dones;
    for (Prepared& p : prepared) {
      reqs.push_back(std::move(p.req));
      dones.push_back(std::move(p.done));
    }
    auto handles = engine_.SubmitGroup(std::move(reqs), std::move(dones));
    if (handles.ok()) return;
    s = handles.status();
  }
  // The engine took none of them: every member fails with the one error.
  for (Prepared& p : prepared) Unprepare(p);
  s = s.WithContext("grouped allreduce (group id " + std::to_string(ops.front().group_id) + ", " +
                    std::to_string(ops.size()) + " members)");
  for (const ValidatedOp& op : ops) Fail(op.op_id, s);
}

namespace {

// The engine request of one validated record; the output is placed by PlaceOutput.
OpRequest RequestFor(const ValidatedOp& op, std::byte* client_heap) {
  OpRequest req;
  req.type = ToOpType(op.type);
  req.name = op.name.empty()
                 ? std::string(RecordOpTypeName(op.type)) + ".op" + std::to_string(op.op_id)
                 : op.name;
  req.dtype = op.dtype;
  req.shape = op.shape;
  req.input = op.input.bytes > 0 ? client_heap + op.input.offset : nullptr;
  req.op = ToReduceOp(op.reduce_op);
  req.prescale = op.prescale;
  req.postscale = op.postscale;
  req.root = op.root;
  req.splits = op.splits;
  req.process_set = op.process_set;
  return req;
}

// Places an output of known size: the client's range, or a new result-heap block.
Status PlaceKnownOutput(const ValidatedOp& op, uint64_t bytes, std::byte* client_heap,
                        PendingOp& pending, OpRequest& req) {
  OpLoop::Session& session = *pending.session;
  pending.output_bytes = bytes;
  if (op.output_in_result_heap) {
    KV_ASSIGN_OR_RETURN(pending.output_offset, session.results.Allocate(bytes));
    pending.result_allocated = true;
    req.output = session.result_base + pending.output_offset;
    return OkStatus();
  }
  if (op.output.bytes < bytes) {
    return InvalidArgument("op " + std::to_string(op.op_id) + " (" + req.name +
                           "): output range of " + std::to_string(op.output.bytes) +
                           " bytes is smaller than the " + std::to_string(bytes) +
                           " bytes of the output");
  }
  pending.output_offset = op.output.offset;
  req.output = client_heap + op.output.offset;
  return OkStatus();
}

// An output whose size the engine learns only after negotiation (allgather, alltoall): the
// engine calls back with the shape, on its own thread.
OutputAllocator LateOutputAllocator(const ValidatedOp& op, std::byte* client_heap,
                                    std::shared_ptr<PendingOp> pending, const std::string& name) {
  const bool in_results = op.output_in_result_heap;
  const Region client_out = op.output;
  const uint64_t elem = DataTypeSize(op.dtype);
  return [pending = std::move(pending), client_heap, client_out, in_results, elem,
          name](const TensorShape& shape) -> StatusOr<void*> {
    OpLoop::Session& session = *pending->session;
    const int64_t signed_bytes = NumBytes(shape, elem);
    if (signed_bytes < 0) {
      return InvalidArgument(name + ": output shape " + ShapeString(shape) + " overflows 64 bits");
    }
    const uint64_t bytes = static_cast<uint64_t>(signed_bytes);
    pending->output_bytes = bytes;
    if (in_results) {
      KV_ASSIGN_OR_RETURN(pending->output_offset, session.results.Allocate(bytes));
      pending->result_allocated = true;
      return static_cast<void*>(session.result_base + pending->output_offset);
    }
    if (client_out.bytes < bytes) {
      return InvalidArgument(name + ": output capacity of " + std::to_string(client_out.bytes) +
                             " bytes is smaller than the " + std::to_string(bytes) +
                             " bytes gathered (shape " + ShapeString(shape) + ")");
    }
    pending->output_offset = client_out.offset;
    return static_cast<void*>(client_heap + client_out.offset);
  };
}

// This rank's block of a reducescatter: the first dimension split over the set, the first set
// ranks getting one more row. (A rank outside the set is refused by the engine at submission.)
TensorShape ReduceScatterBlock(const TensorShape& shape, const Engine::SetInfo& set) {
  const int n = set.size;
  const int r = std::max(set.rank, 0);
  const int64_t d0 = shape.empty() ? 1 : shape[0];
  const int64_t rows = d0 / n + (r < d0 % n ? 1 : 0);
  TensorShape out = shape.empty() ? TensorShape{rows} : shape;
  if (!out.empty()) out[0] = rows;
  return out;
}

// The engine's completion of one op, as a CompletionRecord in its session's queue (engine
// thread). Result-heap blocks of a failed op are freed here.
void CompleteOp(const std::shared_ptr<PendingOp>& pending, EngineMetrics* metrics,
                const Status& status, const OpResult& result) {
  OpLoop::Session& s = *pending->session;
  CompletionRecord c{};
  c.op_id = pending->op_id;
  c.process_set_id = pending->process_set;
  c.last_joined_rank = result.last_joined_rank;
  Status st = status;
  const bool learned = pending->type == OpType::kAllgather || pending->type == OpType::kAlltoall;
  const TensorShape& shape = learned ? result.shape : pending->known_shape;
  if (st.ok() && shape.size() > static_cast<size_t>(kMaxDims)) {
    st = Internal("output has " + std::to_string(shape.size()) + " dimensions");
  }
  if (st.ok() && result.received_splits.size() > kMaxInlineSplits) {
    auto block = s.results.Allocate(result.received_splits.size() * sizeof(int64_t));
    if (!block.ok()) {
      st = block.status();
    } else {
      std::memcpy(s.result_base + *block, result.received_splits.data(),
                  result.received_splits.size() * sizeof(int64_t));
      c.flags |= kCompleteSplitsInResultHeap;
      c.received_splits_offset = *block;
    }
  } else {
    for (size_t i = 0; i < result.received_splits.size(); ++i) {
      c.received_splits[i] = result.received_splits[i];
    }
  }
  c.num_received_splits = (st.ok() || !result.received_splits.empty())
                              ? static_cast<uint32_t>(result.received_splits.size())
                              : 0;
  if (st.ok()) {
    c.ndims = static_cast<uint8_t>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) c.dims[i] = shape[i];
    if (pending->type != OpType::kBarrier && pending->type != OpType::kJoin) {
      c.output_offset = pending->output_offset;
      c.output_bytes = pending->output_bytes;
      if (pending->result_allocated) c.flags |= kCompleteOutputInResultHeap;
    }
  } else {
    c.num_received_splits = 0;
    if (c.flags & kCompleteSplitsInResultHeap) {
      (void)s.results.Free(c.received_splits_offset);
      c.flags = 0;
    }
    if (pending->result_allocated) (void)s.results.Free(pending->output_offset);
  }
  SetStatus(c, st);
  if (metrics != nullptr && st.ok()) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - pending->start).count();
    metrics->RecordOp(pending->type, pending->input_bytes, secs);
  }
  s.Complete(c);
}

}  // namespace

StatusOr<OpLoop::Prepared> OpLoop::Prepare(const ValidatedOp& op) {
  auto pending = std::make_shared<PendingOp>();
  pending->op_id = op.op_id;
  pending->type = ToOpType(op.type);
  pending->dtype = op.dtype;
  pending->process_set = op.process_set;
  pending->input_bytes = op.input.bytes;
  pending->output_in_result_heap = op.output_in_result_heap;
  pending->start = std::chrono::steady_clock::now();
  pending->session = session_;
  std::byte* heap = arena_.client_heap().data();
  OpRequest req = RequestFor(op, heap);

  if (op.on_device) {
    // Device tensors: the output is the trainer's device buffer, nothing to place here.
    pending->known_shape = op.shape;
    pending->input_bytes = static_cast<uint64_t>(op.num_elements) * DataTypeSize(op.dtype);
    KV_RETURN_IF_ERROR(PrepareDevice(op, req.name, req));
    const uint64_t capacity = op.device_output_bytes;
    const uint64_t elem = DataTypeSize(op.dtype);
    if (pending->type == OpType::kReduceScatter) {
      auto info = engine_.ProcessSetInfo(op.process_set);
      if (!info.ok()) return info.status().WithContext("tensor \"" + req.name + "\"");
      pending->known_shape = ReduceScatterBlock(op.shape, *info);
      const uint64_t bytes = static_cast<uint64_t>(NumElements(pending->known_shape)) * elem;
      if (bytes > capacity) {
        return InvalidArgument("tensor \"" + req.name + "\": device output of " +
                               std::to_string(capacity) + " bytes is smaller than this rank's " +
                               std::to_string(bytes) + "-byte block");
      }
    } else if (pending->type == OpType::kAllgather || pending->type == OpType::kAlltoall) {
      // The output's size is known after negotiation: checked against its capacity.
      void* out = req.output;
      req.output = nullptr;
      req.allocate = [out, capacity, elem,
                      name = req.name](const TensorShape& shape) -> StatusOr<void*> {
        const int64_t bytes = NumBytes(shape, elem);
        if (bytes < 0 || static_cast<uint64_t>(bytes) > capacity) {
          return InvalidArgument(name + ": device output of " + std::to_string(capacity) +
                                 " bytes is smaller than the " + std::to_string(bytes) +
                                 " bytes received (shape " + ShapeString(shape) + ")");
        }
        return out;
      };
    }
  } else {
    switch (pending->type) {
      case OpType::kAllreduce:
      case OpType::kBroadcast:
        pending->known_shape = op.shape;
        KV_RETURN_IF_ERROR(PlaceKnownOutput(op, op.input.bytes, heap, *pending, req));
        break;
      case OpType::kReduceScatter: {
        auto info = engine_.ProcessSetInfo(op.process_set);
        if (!info.ok()) return info.status().WithContext("tensor \"" + req.name + "\"");
        pending->known_shape = ReduceScatterBlock(op.shape, *info);
        const uint64_t bytes =
            static_cast<uint64_t>(NumElements(pending->known_shape)) * DataTypeSize(op.dtype);
        KV_RETURN_IF_ERROR(PlaceKnownOutput(op, bytes, heap, *pending, req));
        break;
      }
      case OpType::kAllgather:
      case OpType::kAlltoall:
        req.allocate = LateOutputAllocator(op, heap, pending, req.name);
        break;
      case OpType::kBarrier:
      case OpType::kJoin:
      case OpType::kAddProcessSet:
      case OpType::kRemoveProcessSet:
        break;
    }
  }

  auto done = [pending, metrics = metrics_](const Status& status, const OpResult& result) {
    CompleteOp(pending, metrics, status, result);
  };
  return Prepared{std::move(req), std::move(done), std::move(pending)};
}

Status OpLoop::PrepareDevice(const ValidatedOp& op, const std::string& name, OpRequest& req) {
  const std::string who = "tensor \"" + name + "\"";
  if (device_ == nullptr || !session_->device_handles) {
    return FailedPrecondition(who +
                              " is in device (GPU) memory, but this sidecar has no device "
                              "backend (KOROVOD_DEVICE_BACKEND; a CUDA build and the "
                              "trainer's GPUs visible to the sidecar)");
  }
  const DeviceTensorDescriptor& d = op.device;
  DeviceUuid uuid;
  std::memcpy(uuid.data(), d.device_uuid, uuid.size());
  auto dev = device_->DeviceOf(uuid);
  if (!dev.ok()) return dev.status().WithContext(who);
  DeviceHandleCache& cache = *session_->device_handles;
  const size_t open_before = cache.open();
  const uint64_t opened_before = cache.opened(), replaced_before = cache.replaced();
  auto in = cache.Resolve(*dev, d.input, name);
  StatusOr<std::byte*> out = in.status();
  if (in.ok()) out = cache.Resolve(*dev, d.output, name);
  if (metrics_ != nullptr) {
    metrics_->RecordDeviceAllocations(
        static_cast<double>(cache.open()) - static_cast<double>(open_before),
        cache.opened() - opened_before, cache.replaced() - replaced_before);
  }
  KV_RETURN_IF_ERROR(out.status());
  if ((d.flags & kDeviceReadyEvent) != 0) {
    // The trainer's stream may still be producing the tensor: the collective starts only after
    // the work before the event has completed (Horovod waits for its ready event the same way).
    IpcEventHandle handle;
    std::memcpy(handle.data(), d.event_handle, handle.size());
    auto event = device_->OpenEventHandle(*dev, handle);
    if (!event.ok()) return event.status().WithContext(who + ": opening its ready event");
    Status ready = PollUntilReady([&] { return device_->QueryEvent(*event); },
                                  Deadline::After(ready_timeout_), who + ": ready event");
    device_->DestroyEvent(*event);
    KV_RETURN_IF_ERROR(ready);
  }
  req.input = *in;
  req.output = *out;
  req.device = *dev;
  return OkStatus();
}

}  // namespace korovod::sidecar
