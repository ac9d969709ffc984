#include "runtime/core/fusion_planner.h"

namespace korovod {
namespace {

uint64_t Padded(uint64_t bytes) { return (bytes + kFusionAlign - 1) / kFusionAlign * kFusionAlign; }

bool Fusable(const Response& r) {
  return r.error.empty() && (r.type == OpType::kAllreduce || r.type == OpType::kAllgather);
}

bool Compatible(const Response& a, const Response& b) {
  if (a.type != b.type || a.dtype != b.dtype || a.absent != b.absent) return false;
  if (a.on_device != b.on_device) return false;  // one buffer is host memory, the other device
  if (a.on_device && a.type == OpType::kAllgather) return false;  // device allgathers run alone
  if (a.type == OpType::kAllgather) return true;
  return a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale;
}

}  // namespace

uint64_t FusionBytes(const Response& r) {
  const uint64_t esize = DataTypeSize(r.dtype);
  if (r.type == OpType::kAllgather) {
    uint64_t rows = 0;
    for (int64_t d : r.first_dims) rows += static_cast<uint64_t>(d);
    return Padded(rows * NumElements(r.shape) * esize);
  }
  return Padded(NumElements(r.shape) * esize);
}

std::vector<FusedOp> PlanFusion(const std::vector<Response>& responses, int64_t threshold_bytes,
                                int64_t tensor_max_bytes) {
  const int n = static_cast<int>(responses.size());
  auto packable = [&](const Response& r) {
    return Fusable(r) &&
           (tensor_max_bytes <= 0 || FusionBytes(r) < static_cast<uint64_t>(tensor_max_bytes));
  };
  std::vector<FusedOp> plan;
  std::vector<bool> taken(n, false);
  const uint64_t threshold = threshold_bytes > 0 ? static_cast<uint64_t>(threshold_bytes) : 0;
  for (int i = 0; i < n; ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    FusedOp op;
    op.responses.push_back(i);
    const Response& head = responses[i];
    op.bytes = Fusable(head) ? FusionBytes(head) : 0;
    if (packable(head) && threshold > 0 && op.bytes < threshold) {
      for (int j = i + 1; j < n; ++j) {
        if (taken[j] || !packable(responses[j]) || !Compatible(head, responses[j])) continue;
        const uint64_t b = FusionBytes(responses[j]);
        if (op.bytes + b > threshold) continue;
        taken[j] = true;
        op.responses.push_back(j);
        op.bytes += b;
      }
    }
    plan.push_back(std::move(op));
  }
  return plan;
}

}  // namespace korovod
