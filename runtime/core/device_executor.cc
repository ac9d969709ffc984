#include "runtime/core/device_executor.h"

#include "common/data_type.h"
#include "runtime/core/fusion_planner.h"
#include "runtime/core/pending_op.h"

namespace korovod {

DeviceExecutor::~DeviceExecutor() {
  collectives_.clear();  // communicators before the memory and stream they ran on
  if (backend_.api == nullptr) return;
  if (stream_ != nullptr) {
    (void)Drain("device executor shutdown");
    backend_.api->DestroyStream(stream_);
  }
  if (fusion_ != nullptr) backend_.api->Free(device_, fusion_);
}

void DeviceExecutor::Start(std::vector<OpExecutor::Item>& items, const char* activity) {
  if (timeline_ == nullptr) return;
  for (auto& it : items) timeline_->Start(it.response->name, activity);
}

void DeviceExecutor::End(std::vector<OpExecutor::Item>& items) {
  if (timeline_ == nullptr) return;
  for (auto& it : items) timeline_->End(it.response->name);
}

Status DeviceExecutor::One(OpExecutor::Item& it, const std::string& op,
                           const std::function<Status()>& collective) {
  std::vector<OpExecutor::Item> one = {it};
  const std::string activity = (backend_.api->name() == "cuda" ? "NCCL_" : "DEVICE_") + op;
  Start(one, activity.c_str());
  Status s = collective();
  End(one);
  return s;
}

StatusOr<DeviceCollectives*> DeviceExecutor::CollectivesFor(int set_id, const ProcessSet& set,
                                                            int device) {
  auto it = collectives_.find(set_id);
  if (it != collectives_.end()) return it->second.get();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCollectives> c,
                      backend_.collectives(comm_, set_id == 0 ? nullptr : &set, device));
  ++collectives_made_;
  return collectives_.emplace(set_id, std::move(c)).first->second.get();
}

Status DeviceExecutor::Drain(const std::string& what) {
  return PollUntilReady([&] { return backend_.api->QueryStream(stream_); },
                        Deadline::After(comm_.options().op_timeout), what);
}

StatusOr<std::byte*> DeviceExecutor::FusionBuffer(size_t bytes) {
  if (bytes <= fusion_capacity_) return fusion_;
  if (fusion_ != nullptr) {
    // The stream may still read the old buffer: drain before freeing it.
    KV_RETURN_IF_ERROR(Drain("device fusion buffer resize"));
    backend_.api->Free(device_, fusion_);
    fusion_ = nullptr;
    fusion_capacity_ = 0;
  }
  const size_t rounded = (bytes + (size_t{1} << 20) - 1) / (size_t{1} << 20) << 20;
  KV_ASSIGN_OR_RETURN(void* p, backend_.api->Malloc(device_, rounded));
  fusion_ = static_cast<std::byte*>(p);
  fusion_capacity_ = rounded;
  return fusion_;
}

Status DeviceExecutor::Run(int set_id, const ProcessSet& set, std::vector<OpExecutor::Item>& items,
                           uint64_t* bytes) {
  if (!backend_.enabled()) return Internal("device collective without a device backend");
  // The device: this rank's tensors' (Engine::Submit keeps them on one device).
  int device = device_;
  for (auto& it : items) {
    if (it.op != nullptr) device = it.op->request.device;
  }
  if (device < 0) {
    return Internal("device collective \"" + items.front().response->name +
                    "\" with no device tensor on rank " + std::to_string(comm_.rank()));
  }
  if (device_ < 0) {
    device_ = device;
    KV_ASSIGN_OR_RETURN(stream_, backend_.api->CreateStream(device_));
  }
  KV_ASSIGN_OR_RETURN(DeviceCollectives * c, CollectivesFor(set_id, set, device_));
  switch (items.front().response->type) {
    case OpType::kAllreduce:
      return Allreduce(*c, items, bytes);
    case OpType::kBroadcast:
      return Broadcast(*c, items.front(), bytes);
    case OpType::kAllgather:
      return Allgather(*c, set, items.front(), bytes);
    case OpType::kReduceScatter:
      return ReduceScatter(*c, set, items.front(), bytes);
    case OpType::kAlltoall:
      return Alltoall(*c, set, items.front(), bytes);
    default:
      return Internal(std::string("no device path for ") +
                      OpTypeName(items.front().response->type));
  }
}

Status DeviceExecutor::Allreduce(DeviceCollectives& c, std::vector<OpExecutor::Item>& items,
                                 uint64_t* bytes) {
  const Response& head = *items.front().response;
  const size_t esize = DataTypeSize(head.dtype);
  AllreduceOptions o;
  o.type = head.dtype;
  o.op = head.op;
  o.prescale = head.prescale;
  o.postscale = head.postscale;
  const char* activity = backend_.api->name() == "cuda" ? "NCCL_ALLREDUCE" : "DEVICE_ALLREDUCE";
  if (items.size() == 1) {
    OpExecutor::Item& it = items.front();
    o.input = it.op->request.input;
    o.output = it.op->request.output;
    o.count = static_cast<size_t>(NumElements(head.shape));
    *bytes += o.count * esize;
    Start(items, activity);
    Status s = c.Allreduce(o, stream_);
    End(items);
    return s;
  }
  // Fused: each tensor at its 64-byte aligned offset in the device fusion buffer, as on the CPU.
  uint64_t total = 0;
  for (auto& it : items) total += FusionBytes(*it.response);
  KV_ASSIGN_OR_RETURN(std::byte * buf, FusionBuffer(total));
  Start(items, "MEMCPY_IN_FUSION_BUFFER");
  uint64_t off = 0;
  for (auto& it : items) {
    const size_t n = static_cast<size_t>(NumElements(it.response->shape)) * esize;
    KV_RETURN_IF_ERROR(
        backend_.api->CopyAsync(buf + off, it.op->request.input, n, stream_)
            .WithContext("tensor \"" + it.response->name + "\": into the fusion buffer"));
    *bytes += n;
    off += FusionBytes(*it.response);
  }
  End(items);
  o.input = o.output = buf;
  o.count = total / esize;
  Start(items, activity);
  Status s = c.Allreduce(o, stream_);
  End(items);
  KV_RETURN_IF_ERROR(s);
  Start(items, "MEMCPY_OUT_FUSION_BUFFER");
  off = 0;
  for (auto& it : items) {
    const size_t n = static_cast<size_t>(NumElements(it.response->shape)) * esize;
    KV_RETURN_IF_ERROR(
        backend_.api->CopyAsync(it.op->request.output, buf + off, n, stream_)
            .WithContext("tensor \"" + it.response->name + "\": out of the fusion buffer"));
    off += FusionBytes(*it.response);
  }
  s = Drain("device allreduce of " + std::to_string(items.size()) + " tensors: copies out");
  End(items);
  return s;
}

Status DeviceExecutor::Broadcast(DeviceCollectives& c, OpExecutor::Item& it, uint64_t* bytes) {
  const Response& head = *it.response;
  BroadcastOptions o;
  o.type = head.dtype;
  o.root = head.root;
  o.count = static_cast<size_t>(NumElements(head.shape));
  o.buffer = it.op->request.output;
  const size_t n = o.count * DataTypeSize(head.dtype);
  if (it.op->request.input != it.op->request.output) {
    KV_RETURN_IF_ERROR(
        backend_.api->CopyAsync(it.op->request.output, it.op->request.input, n, stream_));
  }
  *bytes += n;
  return One(it, "BROADCAST", [&] { return c.Broadcast(o, stream_); });
}

StatusOr<void*> DeviceExecutor::DeviceOutput(OpExecutor::Item& it, const TensorShape& shape,
                                             size_t bytes) {
  // Submit made sure the op has an allocator or an output: never the engine-kept host result.
  StatusOr<std::byte*> out = OpExecutor::Output(*it.op, shape, bytes);
  if (out.ok() && *out != nullptr) return static_cast<void*>(*out);
  it.status =
      out.ok() ? Internal("tensor \"" + it.response->name + "\": no device output") : out.status();
  KV_ASSIGN_OR_RETURN(std::byte * scratch, FusionBuffer(bytes));
  return static_cast<void*>(scratch);
}

// Every rank's rows into the op's device output (its allocator's, once the size is known); the
// collective runs even when the output cannot be had (the other ranks are in it), into scratch.
Status DeviceExecutor::Allgather(DeviceCollectives& c, const ProcessSet& set, OpExecutor::Item& it,
                                 uint64_t* bytes) {
  const Response& head = *it.response;
  const size_t esize = DataTypeSize(head.dtype);
  const std::vector<OpExecutor::Item> one = {it};
  const OpExecutor::GatherLayout layout(one, set.size());
  const size_t total = layout.total;
  KV_ASSIGN_OR_RETURN(void* out, DeviceOutput(it, layout.OutputShape(one, 0), total * esize));
  AllgatherOptions o;
  o.input = it.op->request.input;
  o.output = out;
  o.counts = layout.counts;
  o.type = head.dtype;
  *bytes += total * esize;
  return One(it, "ALLGATHER", [&] { return c.Allgather(o, stream_); });
}

// This rank's block of the first dimension (the first ranks get one more row), as on the CPU.
Status DeviceExecutor::ReduceScatter(DeviceCollectives& c, const ProcessSet& set,
                                     OpExecutor::Item& it, uint64_t* bytes) {
  const Response& head = *it.response;
  const std::vector<size_t> counts = ReduceScatterCounts(head.shape, set.size());
  ReduceScatterOptions o;
  o.input = it.op->request.input;
  o.output = it.op->request.output;
  o.recv_counts = counts;
  o.type = head.dtype;
  o.op = head.op;
  o.prescale = head.prescale;
  o.postscale = head.postscale;
  *bytes += static_cast<size_t>(NumElements(head.shape)) * DataTypeSize(head.dtype);
  return One(it, "REDUCESCATTER", [&] { return c.ReduceScatter(o, stream_); });
}

// The rows each rank sends (the op's splits) travel first over the CPU connections, as on the
// CPU path; then the tensor moves device to device into the output sized by what arrives.
Status DeviceExecutor::Alltoall(DeviceCollectives& c, const ProcessSet& set, OpExecutor::Item& it,
                                uint64_t* bytes) {
  const Response& head = *it.response;
  // Responses carry the dimensions after the first.
  KV_ASSIGN_OR_RETURN(AlltoallPlan plan,
                      PlanAlltoall(comm_, set, it.op->request.splits, head.shape));
  const size_t out_bytes =
      static_cast<size_t>(NumElements(plan.output_shape)) * DataTypeSize(head.dtype);
  KV_ASSIGN_OR_RETURN(void* out, DeviceOutput(it, plan.output_shape, out_bytes));
  it.op->state->result.received_splits = plan.recv_rows;
  AlltoallOptions a;
  a.input = it.op->request.input;
  a.output = out;
  a.send_counts = plan.send_counts;
  a.recv_counts = plan.recv_counts;
  a.type = head.dtype;
  *bytes += out_bytes;
  return One(it, "ALLTOALL", [&] { return c.Alltoall(a, stream_); });
}

}  // namespace korovod
