#include "runtime/core/admission.h"

#include <algorithm>
#include <cctype>

namespace korovod {
namespace {

// What this rank reports to the coordinator about `r`.
Request ReportOf(const OpRequest& r, const std::string& group, int32_t group_size) {
  Request q;
  q.type = r.type;
  q.name = r.name;
  q.dtype = r.dtype;
  q.shape = r.shape;
  q.op = r.op;
  q.prescale = r.prescale;
  q.postscale = r.postscale;
  q.root = r.root;
  q.group = group;
  q.group_size = group_size;
  q.set_ranks = r.members;
  q.on_device = r.device >= 0;
  return q;
}

}  // namespace

Status CheckRequest(const OpRequest& r, int set_size, int set_rank) {
  // The peers refuse what exceeds the negotiation's caps: refused here, on this rank, at once.
  if (r.name.size() > kMaxTensorNameBytes) {
    return InvalidArgument("tensor \"" + r.name.substr(0, 64) + "...\": a name of " +
                           std::to_string(r.name.size()) + " bytes, longer than " +
                           std::to_string(kMaxTensorNameBytes));
  }
  const std::string who = "tensor \"" + r.name + "\": ";
  if (r.shape.size() > kMaxTensorDims) {
    return InvalidArgument(who + std::to_string(r.shape.size()) + " dimensions, more than " +
                           std::to_string(kMaxTensorDims));
  }
  if (r.members.size() > kMaxEntryRanks) {
    return InvalidArgument(who + std::to_string(r.members.size()) + " ranks, more than " +
                           std::to_string(kMaxEntryRanks));
  }
  for (int64_t d : r.shape) {
    if (d < 0) return InvalidArgument(who + "negative dimension in shape " + ShapeString(r.shape));
  }
  const int64_t elems = NumElements(r.shape);
  if (elems < 0 || NumBytes(r.shape, DataTypeSize(r.dtype)) < 0) {
    return InvalidArgument(who + "shape " + ShapeString(r.shape) + " of " +
                           DataTypeName(r.dtype) + " overflows 64 bits");
  }
  const bool has_data = r.type != OpType::kBarrier && r.type != OpType::kJoin &&
                        r.type != OpType::kAddProcessSet && r.type != OpType::kRemoveProcessSet;
  if (has_data && elems > 0 && r.input == nullptr) {
    if (!(r.type == OpType::kBroadcast && set_rank != r.root)) {
      return InvalidArgument(who + "null input for " + std::to_string(elems) + " elements");
    }
  }
  switch (r.type) {
    case OpType::kAllgather:
    case OpType::kAlltoall:
    case OpType::kReduceScatter:
      if (r.shape.empty()) {
        return InvalidArgument(who + OpTypeName(r.type) +
                               " needs a tensor with at least one dimension");
      }
      break;
    case OpType::kBroadcast:
      if (r.root < 0 || r.root >= set_size) {
        return InvalidArgument(who + "broadcast root " + std::to_string(r.root) +
                               " is not a rank of a set of " + std::to_string(set_size));
      }
      break;
    default:
      break;
  }
  if (r.type == OpType::kAlltoall && !r.splits.empty()) {
    if (static_cast<int>(r.splits.size()) != set_size) {
      return InvalidArgument(who + "alltoall has " + std::to_string(r.splits.size()) +
                             " splits for a set of " + std::to_string(set_size) + " ranks");
    }
    int64_t sum = 0;
    for (int64_t v : r.splits) {
      if (v < 0) return InvalidArgument(who + "alltoall split is negative");
      if (__builtin_add_overflow(sum, v, &sum)) {
        return InvalidArgument(who + "alltoall splits overflow 64 bits");
      }
    }
    if (sum != r.shape[0]) {
      return InvalidArgument(who + "alltoall splits sum to " + std::to_string(sum) +
                             " but the first dimension is " + std::to_string(r.shape[0]));
    }
  }
  if (r.type == OpType::kAlltoall && r.splits.empty() && r.shape[0] % set_size != 0) {
    return InvalidArgument(who + "alltoall without splits needs the first dimension (" +
                           std::to_string(r.shape[0]) + ") divisible by the set size (" +
                           std::to_string(set_size) + ")");
  }
  return OkStatus();
}

Status Admission::CheckOne(OpRequest& r, std::unordered_set<std::string>& names_in_call) {
  auto shape_it = sets_.find(r.process_set);
  if (shape_it == sets_.end()) {
    return InvalidArgument("tensor \"" + r.name + "\": unknown process set " +
                           std::to_string(r.process_set));
  }
  if (shape_it->second.my_rank < 0) {
    return InvalidArgument("tensor \"" + r.name + "\": this rank is not a member of process set " +
                           std::to_string(r.process_set));
  }
  if (joined_.count(r.process_set) != 0) {
    return FailedPrecondition("tensor \"" + r.name + "\": this rank has joined process set " +
                              std::to_string(r.process_set) +
                              "; it submits nothing until the join completes");
  }
  if (r.name.empty()) {
    const uint64_t n = noname_counter_[static_cast<int>(r.type) * 1000 + r.process_set]++;
    std::string lower = OpTypeName(r.type);
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    r.name = lower + ".noname." + std::to_string(n);
  }
  KV_RETURN_IF_ERROR(CheckRequest(r, shape_it->second.size, shape_it->second.my_rank));
  const std::string key = Key(r.process_set, r.name);
  if (in_flight_.count(key) != 0 || !names_in_call.insert(key).second) {
    return InvalidArgument("tensor \"" + r.name +
                           "\" is already in flight on this rank (names "
                           "must be unique among ops not yet completed)");
  }
  return OkStatus();
}

StatusOr<std::vector<std::unique_ptr<PendingOp>>> Admission::Admit(std::vector<OpRequest> requests,
                                                                   std::vector<DoneCallback> done) {
  if (requests.size() > 1) {
    for (const OpRequest& r : requests) {
      if (r.type != OpType::kAllreduce) return InvalidArgument("groups are allreduce only");
    }
  }
  std::unordered_set<std::string> names_in_call;
  for (OpRequest& r : requests) KV_RETURN_IF_ERROR(CheckOne(r, names_in_call));

  std::string group;
  if (requests.size() > 1) group = requests.front().name + "+" + std::to_string(requests.size());
  const int32_t group_size = group.empty() ? 0 : static_cast<int32_t>(requests.size());
  std::vector<std::unique_ptr<PendingOp>> ops;
  for (size_t i = 0; i < requests.size(); ++i) {
    OpRequest& r = requests[i];
    auto op = std::make_unique<PendingOp>();
    op->set_id = r.process_set;
    op->report = ReportOf(r, group, group_size);
    if (r.type == OpType::kAlltoall && r.splits.empty()) {
      const int n = sets_[r.process_set].size;
      r.splits.assign(n, r.shape[0] / n);
    }
    op->state = std::make_shared<OpState>();
    op->state->name = r.name;
    op->state->callback = std::move(done[i]);
    op->request = std::move(r);
    in_flight_.insert(Key(op->set_id, op->report.name));
    if (op->report.type == OpType::kJoin) joined_.insert(op->set_id);
    ops.push_back(std::move(op));
  }
  return ops;
}

}  // namespace korovod
