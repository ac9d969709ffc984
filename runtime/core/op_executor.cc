#include "runtime/core/op_executor.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "runtime/collectives/collectives.h"
#include "runtime/core/fusion_planner.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod {
namespace {

// Draws the data plane's phases on the lanes of every tensor in the running collective.
class TimelinePhases : public PhaseObserver {
 public:
  TimelinePhases(Timeline* t, std::vector<OpExecutor::Item>& items, Communicator& comm)
      : timeline_(t), items_(items), comm_(comm) {
    if (timeline_ != nullptr) comm_.set_phase_observer(this);
  }
  ~TimelinePhases() override {
    if (timeline_ != nullptr) comm_.set_phase_observer(nullptr);
  }
  void PhaseBegin(const char* phase) override {
    for (auto& it : items_) timeline_->Start(it.response->name, phase);
  }
  void PhaseEnd() override {
    for (auto& it : items_) timeline_->End(it.response->name);
  }

 private:
  Timeline* timeline_;
  std::vector<OpExecutor::Item>& items_;
  Communicator& comm_;
};

}  // namespace

size_t RowElements(const TensorShape& trailing) {
  return static_cast<size_t>(NumElements(trailing));
}

std::vector<size_t> ReduceScatterCounts(const TensorShape& shape, int set_size) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const size_t row = shape.empty() ? 1 : RowElements(TensorShape(shape.begin() + 1, shape.end()));
  std::vector<size_t> counts(set_size);
  for (int j = 0; j < set_size; ++j) {
    counts[j] = static_cast<size_t>(rows / set_size + (j < rows % set_size ? 1 : 0)) * row;
  }
  return counts;
}

StatusOr<AlltoallPlan> PlanAlltoall(Communicator& comm, const ProcessSet& set,
                                    const std::vector<int64_t>& send_rows,
                                    const TensorShape& trailing) {
  const int n = set.size();
  AlltoallPlan plan;
  plan.recv_rows.assign(n, 0);
  std::vector<size_t> ones(n, 1);
  AlltoallOptions s;
  s.input = send_rows.data();
  s.output = plan.recv_rows.data();
  s.send_counts = ones;
  s.recv_counts = ones;
  s.type = DataType::kInt64;
  s.set = &set;
  KV_RETURN_IF_ERROR(korovod::Alltoall(comm, s));
  const size_t row = RowElements(trailing);
  plan.send_counts.resize(n);
  plan.recv_counts.resize(n);
  int64_t recv_total = 0;
  for (int j = 0; j < n; ++j) {
    plan.send_counts[j] = static_cast<size_t>(send_rows[j]) * row;
    plan.recv_counts[j] = static_cast<size_t>(plan.recv_rows[j]) * row;
    recv_total += plan.recv_rows[j];
  }
  plan.output_shape = {recv_total};
  plan.output_shape.insert(plan.output_shape.end(), trailing.begin(), trailing.end());
  return plan;
}

StatusOr<std::byte*> OpExecutor::Output(PendingOp& op, const TensorShape& shape, size_t bytes) {
  op.state->result.shape = shape;
  if (op.request.allocate) {
    StatusOr<void*> p = op.request.allocate(shape);
    if (!p.ok()) {
      return p.status().WithContext("tensor \"" + op.report.name + "\": output allocation");
    }
    if (*p == nullptr && bytes > 0) {
      return Internal("tensor \"" + op.report.name + "\": output allocator returned null for " +
                      std::to_string(bytes) + " bytes");
    }
    return static_cast<std::byte*>(*p);
  }
  if (op.request.output != nullptr) return static_cast<std::byte*>(op.request.output);
  op.state->result.data.resize(bytes);
  return op.state->result.data.data();
}

void OpExecutor::Start(std::vector<Item>& items, const char* activity, const std::string& args) {
  if (timeline_ == nullptr) return;
  for (auto& it : items) timeline_->Start(it.response->name, activity, args);
}

void OpExecutor::End(std::vector<Item>& items) {
  if (timeline_ == nullptr) return;
  for (auto& it : items) timeline_->End(it.response->name);
}

Status OpExecutor::Run(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes) {
  const Response& head = *items.front().response;
  switch (head.type) {
    case OpType::kAllreduce:
      return Allreduce(set, items, bytes);
    case OpType::kAllgather:
      return Allgather(set, items, bytes);
    case OpType::kBroadcast:
      return Broadcast(set, items.front(), bytes);
    case OpType::kAlltoall:
      return Alltoall(set, items.front(), bytes);
    case OpType::kReduceScatter:
      return ReduceScatter(set, items.front(), bytes);
    case OpType::kBarrier: {
      Start(items, "BARRIER");
      TimelinePhases phases(timeline_, items, comm_);
      Status s = korovod::Barrier(comm_, &set);
      End(items);
      return s;
    }
    default:
      return Internal(std::string("executor cannot run ") + OpTypeName(head.type));
  }
}

Status OpExecutor::Allreduce(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes) {
  const Response& head = *items.front().response;
  AllreduceOptions o;
  o.type = head.dtype;
  o.op = head.op;
  o.prescale = head.prescale;
  o.postscale = head.postscale;
  o.set = &set;
  // Absent (joined) ranks add the identity (zero): Average divides by the whole set, as Horovod.
  if (items.size() == 1) return AllreduceUnfused(items, o, bytes);
  return AllreduceFused(items, o, bytes);
}

// Straight from the input to the output, no staging copy.
Status OpExecutor::AllreduceUnfused(std::vector<Item>& items, AllreduceOptions& o,
                                    uint64_t* bytes) {
  const Response& head = *items.front().response;
  const size_t esize = DataTypeSize(head.dtype);
  Item& it = items.front();
  const size_t count = static_cast<size_t>(NumElements(head.shape));
  if (it.op != nullptr) {
    StatusOr<std::byte*> out = Output(*it.op, head.shape, count * esize);
    if (!out.ok()) {
      // The collective must still run (the other ranks are in it): contribute identity.
      it.status = out.status();
      it.op = nullptr;
    } else {
      o.input = it.op->request.input;
      o.output = *out;
    }
  }
  if (it.op == nullptr) {
    std::byte* buf = identity_.Get(count * esize);
    FillIdentity(buf, count, head.dtype, head.op);
    o.input = o.output = buf;
  }
  o.count = count;
  *bytes += count * esize;
  Start(items, "ALLREDUCE", "{\"bytes\":" + std::to_string(count * esize) + "}");
  TimelinePhases phases(timeline_, items, comm_);
  Status s = korovod::Allreduce(comm_, o);
  End(items);
  return s;
}

void OpExecutor::CopyIn(std::vector<Item>& items, size_t begin, size_t end, std::byte* buf,
                        DataType type, ReduceOp op) {
  const size_t esize = DataTypeSize(type);
  uint64_t off = 0;
  for (size_t k = begin; k < end; ++k) {
    Item& it = items[k];
    const size_t count = static_cast<size_t>(NumElements(it.response->shape));
    const size_t padded = FusionBytes(*it.response);
    if (it.op != nullptr) {
      std::memcpy(buf + off, it.op->request.input, count * esize);
    } else {
      FillIdentity(buf + off, count, type, op);
    }
    // Padding joins the reduction: give it a harmless value.
    if (padded > count * esize) std::memset(buf + off + count * esize, 0, padded - count * esize);
    off += padded;
  }
}

void OpExecutor::CopyOut(std::vector<Item>& items, size_t begin, size_t end, const std::byte* buf,
                         DataType type) {
  const size_t esize = DataTypeSize(type);
  uint64_t off = 0;
  for (size_t k = begin; k < end; ++k) {
    Item& it = items[k];
    const size_t count = static_cast<size_t>(NumElements(it.response->shape));
    if (it.op != nullptr) {
      StatusOr<std::byte*> out = Output(*it.op, it.response->shape, count * esize);
      if (out.ok()) {
        std::memcpy(*out, buf + off, count * esize);
      } else {
        it.status = out.status();
      }
    }
    off += FusionBytes(*it.response);
  }
}

// Copied into the fusion buffer (64-byte aligned), reduced as one, copied out.
Status OpExecutor::AllreduceFused(std::vector<Item>& items, AllreduceOptions& o, uint64_t* bytes) {
  const Response& head = *items.front().response;
  const size_t esize = DataTypeSize(head.dtype);
  uint64_t total = 0;
  std::vector<size_t> cuts;  // item indices where a pipeline segment starts
  for (size_t k = 0; k < items.size(); ++k) {
    if (k > 0 && total >= kSegmentBytes * (cuts.size() + 1)) cuts.push_back(k);
    total += FusionBytes(*items[k].response);
  }
  // Shared windows mean one host: there the reduction itself is memory-bound on every core, and a
  // copy thread beside it would only compete (and the buffer is built in the window instead).
  SharedWindows* windows = comm_.transport().shared_windows();
  if (pipeline_ && windows == nullptr && !cuts.empty() && total >= 2 * kSegmentBytes) {
    return AllreducePipelined(items, o, bytes, cuts);
  }
  // Built in this rank's shared window where it fits: the peers then reduce from it in place.
  std::byte* buf = windows != nullptr && total <= windows->window_bytes()
                       ? windows->window(comm_.rank())
                       : fusion_.Get(total);
  if (buf == nullptr)
    return Internal("cannot allocate a fusion buffer of " + std::to_string(total) + " bytes");

  Start(items, "MEMCPY_IN_FUSION_BUFFER");
  CopyIn(items, 0, items.size(), buf, head.dtype, head.op);
  End(items);

  o.input = o.output = buf;
  o.count = total / esize;
  *bytes += total;
  Start(items, "ALLREDUCE",
        "{\"bytes\":" + std::to_string(total) +
            ",\"fused_tensors\":" + std::to_string(items.size()) + "}");
  Status s;
  {
    TimelinePhases phases(timeline_, items, comm_);
    s = korovod::Allreduce(comm_, o);
  }
  End(items);
  if (!s.ok()) return s;

  Start(items, "MEMCPY_OUT_FUSION_BUFFER");
  CopyOut(items, 0, items.size(), buf, head.dtype);
  End(items);
  return OkStatus();
}

// A large fused buffer in segments (split at tensor boundaries, about kSegmentBytes each), one
// collective per segment, two buffers in turn: while the engine thread runs segment k's
// collective, the copy worker copies segment k-1 out and segment k+1 in. Every rank cuts at the
// same tensors (the responses and their sizes are the same everywhere), so segment k is the same
// collective on every rank.
Status OpExecutor::AllreducePipelined(std::vector<Item>& items, AllreduceOptions& o,
                                      uint64_t* bytes, const std::vector<size_t>& cuts) {
  const Response& head = *items.front().response;
  const size_t esize = DataTypeSize(head.dtype);
  std::vector<size_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(items.size());
  const size_t segments = bounds.size() - 1;
  std::vector<uint64_t> seg_bytes(segments, 0);
  uint64_t largest = 0;
  for (size_t g = 0; g < segments; ++g) {
    for (size_t k = bounds[g]; k < bounds[g + 1]; ++k)
      seg_bytes[g] += FusionBytes(*items[k].response);
    largest = std::max(largest, seg_bytes[g]);
  }
  std::byte* bufs[2] = {fusion_.Get(largest), fusion_next_.Get(largest)};
  if (bufs[0] == nullptr || bufs[1] == nullptr) {
    return Internal("cannot allocate two fusion buffers of " + std::to_string(largest) + " bytes");
  }
  if (copier_ == nullptr) copier_ = std::make_unique<SerialWorker>();

  // The items of one segment, for the timeline: lanes are per tensor.
  auto segment_items = [&](size_t g) {
    return std::vector<Item>(items.begin() + static_cast<std::ptrdiff_t>(bounds[g]),
                             items.begin() + static_cast<std::ptrdiff_t>(bounds[g + 1]));
  };
  auto copy_in = [&, this](size_t g) {
    std::vector<Item> seg = segment_items(g);
    Start(seg, "MEMCPY_IN_FUSION_BUFFER");
    CopyIn(items, bounds[g], bounds[g + 1], bufs[g % 2], head.dtype, head.op);
    End(seg);
  };
  auto copy_out = [&, this](size_t g) {
    std::vector<Item> seg = segment_items(g);
    Start(seg, "MEMCPY_OUT_FUSION_BUFFER");
    CopyOut(items, bounds[g], bounds[g + 1], bufs[g % 2], head.dtype);
    End(seg);
  };

  copier_->Post([&copy_in] { copy_in(0); });
  copier_->Drain();
  Status s;
  for (size_t g = 0; g < segments; ++g) {
    // FIFO: segment g-1's copy out (posted last round) runs before g+1's copy in overwrites
    // the buffer they share.
    if (g + 1 < segments) copier_->Post([&copy_in, g] { copy_in(g + 1); });
    std::vector<Item> seg = segment_items(g);
    o.input = o.output = bufs[g % 2];
    o.count = seg_bytes[g] / esize;
    *bytes += seg_bytes[g];
    Start(seg, "ALLREDUCE",
          "{\"bytes\":" + std::to_string(seg_bytes[g]) + ",\"fused_tensors\":" +
              std::to_string(seg.size()) + ",\"segment\":" + std::to_string(g) + "}");
    {
      TimelinePhases phases(timeline_, seg, comm_);
      s = korovod::Allreduce(comm_, o);
    }
    End(seg);
    copier_->Drain();  // nothing of this call may still run once it returns
    if (!s.ok()) return s;
    ++pipelined_segments_;
    copier_->Post([&copy_out, g] { copy_out(g); });
  }
  copier_->Drain();
  return OkStatus();
}

OpExecutor::GatherLayout::GatherLayout(const std::vector<Item>& items, int n)
    : rows(items.size()), counts(n, 0) {
  for (size_t k = 0; k < items.size(); ++k) {
    rows[k] = items[k].response->first_dims;  // absent ranks send none
    for (int r = 0; r < n; ++r) {
      counts[r] += static_cast<size_t>(rows[k][r]) * RowElements(items[k].response->shape);
    }
  }
  for (size_t c : counts) total += c;
}

TensorShape OpExecutor::GatherLayout::OutputShape(const std::vector<Item>& items, size_t k) const {
  TensorShape s;
  int64_t sum = 0;
  for (int64_t d : rows[k]) sum += d;
  s.push_back(sum);
  s.insert(s.end(), items[k].response->shape.begin(), items[k].response->shape.end());
  return s;
}

Status OpExecutor::Allgather(const ProcessSet& set, std::vector<Item>& items, uint64_t* bytes) {
  const DataType dtype = items.front().response->dtype;
  const GatherLayout layout(items, set.size());
  *bytes += layout.total * DataTypeSize(dtype);

  AllgatherOptions o;
  o.type = dtype;
  o.set = &set;
  o.counts = layout.counts;
  if (items.size() == 1) return AllgatherUnfused(items, layout, o);
  return AllgatherFused(set, items, layout, o);
}

// Straight into the op's output; with no output (joined, or allocation failed), into scratch.
Status OpExecutor::AllgatherUnfused(std::vector<Item>& items, const GatherLayout& layout,
                                    AllgatherOptions& o) {
  const size_t esize = DataTypeSize(o.type);
  const size_t total = layout.total;
  Item& it = items.front();
  std::byte* out = nullptr;
  if (it.op != nullptr) {
    StatusOr<std::byte*> o_ = Output(*it.op, layout.OutputShape(items, 0), total * esize);
    if (o_.ok()) {
      out = *o_;
      o.input = it.op->request.input;
    } else {
      it.status = o_.status();
    }
  }
  if (out == nullptr) out = fusion_.Get(total * esize);
  o.output = out;
  Start(items, "ALLGATHER", "{\"bytes\":" + std::to_string(total * esize) + "}");
  TimelinePhases phases(timeline_, items, comm_);
  Status s = korovod::Allgather(comm_, o);
  End(items);
  return s;
}

Status OpExecutor::AllgatherFused(const ProcessSet& set, std::vector<Item>& items,
                                  const GatherLayout& layout, AllgatherOptions& o) {
  const int n = set.size();
  const int me = set.rank();
  const size_t esize = DataTypeSize(o.type);
  const size_t total = layout.total;
  const std::vector<size_t>& counts = layout.counts;
  const auto& rows = layout.rows;
  // This rank's pieces back to back after the gathered region.
  std::byte* buf = fusion_.Get((total + counts[me]) * esize);
  if (buf == nullptr) return Internal("cannot allocate a fusion buffer");
  std::byte* mine = buf + total * esize;
  Start(items, "MEMCPY_IN_FUSION_BUFFER");
  size_t off = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const size_t len =
        static_cast<size_t>(rows[k][me]) * RowElements(items[k].response->shape) * esize;
    if (len > 0 && items[k].op != nullptr) std::memcpy(mine + off, items[k].op->request.input, len);
    off += len;
  }
  End(items);
  o.input = mine;
  o.output = buf;
  Start(items, "ALLGATHER",
        "{\"bytes\":" + std::to_string(total * esize) +
            ",\"fused_tensors\":" + std::to_string(items.size()) + "}");
  Status s;
  {
    TimelinePhases phases(timeline_, items, comm_);
    s = korovod::Allgather(comm_, o);
  }
  End(items);
  if (!s.ok()) return s;

  // Rank r's block holds its rows of tensor 0, then of tensor 1, ...
  std::vector<size_t> block_start(n, 0);
  for (int r = 1; r < n; ++r) block_start[r] = block_start[r - 1] + counts[r - 1] * esize;
  std::vector<size_t> cursor = block_start;
  Start(items, "MEMCPY_OUT_FUSION_BUFFER");
  for (size_t k = 0; k < items.size(); ++k) {
    const size_t row_bytes = RowElements(items[k].response->shape) * esize;
    std::byte* out = nullptr;
    if (items[k].op != nullptr) {
      const TensorShape shape = layout.OutputShape(items, k);
      const int64_t bytes = NumBytes(shape, esize);
      StatusOr<std::byte*> o_ =
          bytes < 0 ? InvalidArgument("tensor \"" + items[k].response->name + "\": output shape " +
                                      ShapeString(shape) + " overflows 64 bits")
                    : Output(*items[k].op, shape, static_cast<size_t>(bytes));
      if (o_.ok()) {
        out = *o_;
      } else {
        items[k].status = o_.status();
      }
    }
    size_t out_off = 0;
    for (int r = 0; r < n; ++r) {
      const size_t len = static_cast<size_t>(rows[k][r]) * row_bytes;
      if (out != nullptr && len > 0) std::memcpy(out + out_off, buf + cursor[r], len);
      out_off += len;
      cursor[r] += len;
    }
  }
  End(items);
  return OkStatus();
}

Status OpExecutor::Broadcast(const ProcessSet& set, Item& it, uint64_t* bytes) {
  const Response& r = *it.response;
  const size_t len = static_cast<size_t>(NumElements(r.shape)) * DataTypeSize(r.dtype);
  std::byte* buf = nullptr;
  if (it.op != nullptr) {
    StatusOr<std::byte*> out = Output(*it.op, r.shape, len);
    if (out.ok()) {
      buf = *out;
      if (set.rank() == r.root && it.op->request.input != nullptr && it.op->request.input != buf) {
        std::memcpy(buf, it.op->request.input, len);
      }
    } else {
      it.status = out.status();
    }
  }
  if (buf == nullptr) buf = identity_.Get(len);
  *bytes += len;
  BroadcastOptions o;
  o.buffer = buf;
  o.count = static_cast<size_t>(NumElements(r.shape));
  o.type = r.dtype;
  o.root = r.root;
  o.set = &set;
  std::vector<Item> one{it};
  Start(one, "BROADCAST", "{\"bytes\":" + std::to_string(len) + "}");
  Status s;
  {
    TimelinePhases phases(timeline_, one, comm_);
    s = korovod::Broadcast(comm_, o);
  }
  End(one);
  it.status = one.front().status;
  return s;
}

Status OpExecutor::Alltoall(const ProcessSet& set, Item& it, uint64_t* bytes) {
  const Response& r = *it.response;
  const size_t esize = DataTypeSize(r.dtype);
  PendingOp& op = *it.op;  // alltoall never runs with absent ranks (the coordinator refuses)
  std::vector<Item> one{it};
  Start(one, "ALLTOALL");
  TimelinePhases phases(timeline_, one, comm_);
  KV_ASSIGN_OR_RETURN(AlltoallPlan plan, PlanAlltoall(comm_, set, op.request.splits, r.shape));
  const size_t out_bytes = static_cast<size_t>(NumElements(plan.output_shape)) * esize;
  std::byte* out = nullptr;
  StatusOr<std::byte*> o_ = Output(op, plan.output_shape, out_bytes);
  if (o_.ok()) {
    out = *o_;
  } else {
    it.status = o_.status();
    out = fusion_.Get(out_bytes);
  }
  op.state->result.received_splits = plan.recv_rows;
  AlltoallOptions a;
  a.input = op.request.input;
  a.output = out;
  a.send_counts = plan.send_counts;
  a.recv_counts = plan.recv_counts;
  a.type = r.dtype;
  a.set = &set;
  *bytes += out_bytes;
  Status s = korovod::Alltoall(comm_, a);
  End(one);
  return s;
}

Status OpExecutor::ReduceScatter(const ProcessSet& set, Item& it, uint64_t* bytes) {
  const Response& r = *it.response;
  const int n = set.size();
  const size_t esize = DataTypeSize(r.dtype);
  TensorShape trailing =
      r.shape.empty() ? TensorShape{} : TensorShape(r.shape.begin() + 1, r.shape.end());
  const size_t row = RowElements(trailing);
  const std::vector<size_t> recv_counts = ReduceScatterCounts(r.shape, n);
  const size_t total = static_cast<size_t>(NumElements(r.shape));
  const size_t mine = recv_counts[set.rank()];
  ReduceScatterOptions o;
  o.recv_counts = recv_counts;
  o.type = r.dtype;
  o.op = r.op;
  o.prescale = r.prescale;
  o.postscale = r.postscale;
  o.set = &set;
  std::byte* out = nullptr;
  if (it.op != nullptr) {
    TensorShape shape{static_cast<int64_t>(mine / std::max<size_t>(row, 1))};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    StatusOr<std::byte*> o_ = Output(*it.op, shape, mine * esize);
    if (o_.ok()) {
      out = *o_;
      o.input = it.op->request.input;
    } else {
      it.status = o_.status();
    }
  }
  if (o.input == nullptr) {
    std::byte* id = identity_.Get(total * esize);
    FillIdentity(id, total, r.dtype, r.op);
    o.input = id;
  }
  if (out == nullptr) out = fusion_.Get(mine * esize);
  o.output = out;
  *bytes += total * esize;
  std::vector<Item> one{it};
  Start(one, "REDUCESCATTER");
  Status s;
  {
    TimelinePhases phases(timeline_, one, comm_);
    s = korovod::ReduceScatter(comm_, o);
  }
  End(one);
  it.status = one.front().status;
  return s;
}

}  // namespace korovod
