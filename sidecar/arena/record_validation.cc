#include "sidecar/arena/record_validation.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace korovod::sidecar {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
  return buf;
}

std::string Num(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string Shape(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

std::string Range(uint64_t offset, uint64_t bytes) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
         std::to_string(bytes) + ")";
}

bool Disjoint(const Region& a, const Region& b) {
  return a.bytes == 0 || b.bytes == 0 || a.offset + a.bytes <= b.offset ||
         b.offset + b.bytes <= a.offset;
}

bool AllZero(const uint8_t* p, size_t n, size_t* first_nonzero) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) {
      *first_nonzero = i;
      return false;
    }
  }
  return true;
}

class Validator {
 public:
  Validator(const SubmissionRecord& r, const ArenaLayout& layout,
            std::span<const std::byte> client_heap)
      : r_(r), layout_(layout), client_heap_(client_heap) {
    prefix_ = "submission (op id " + std::to_string(r_.op_id) + "): ";
  }

  StatusOr<ValidatedOp> Run();

 private:
  Status Bad(const std::string& what) const { return InvalidArgument(prefix_ + what); }
  Status CheckCommon();
  Status CheckRelease();
  Status CheckName();
  Status CheckShape();
  Status CheckTensorRanges();
  Status CheckNoTensor();
  Status CheckSplits();
  Status CheckGroup();
  Status CheckDeviceTensor();
  Status CheckDeviceBuffer(const char* which, const DeviceBufferRecord& b, uint64_t bytes) const;
  Status CheckRange(const char* field, uint64_t offset, uint64_t bytes, Region* out) const;

  const SubmissionRecord& r_;  // a private copy (see ValidateSubmission)
  const ArenaLayout& layout_;
  std::span<const std::byte> client_heap_;
  std::string prefix_;
  ValidatedOp op_;
  size_t elem_bytes_ = 0;
};

Status Validator::CheckCommon() {
  if (r_.kind != RecordKind::kOp && r_.kind != RecordKind::kReleaseResult) {
    return Bad("kind " + std::to_string(static_cast<unsigned>(r_.kind)) +
               " is not a record kind (1 = op, 2 = release-result)");
  }
  if ((r_.flags & ~kSubmitKnownFlags) != 0) {
    return Bad("flags " + Hex(r_.flags) + " has unknown bits " +
               Hex(static_cast<uint8_t>(r_.flags & ~kSubmitKnownFlags)));
  }
  size_t at = 0;
  if (!AllZero(r_.reserved, sizeof(r_.reserved), &at)) {
    return Bad("reserved[" + std::to_string(at) + "] is " + std::to_string(r_.reserved[at]) +
               ", must be 0");
  }
  return OkStatus();
}

Status Validator::CheckRelease() {
  const uint64_t off = r_.output_offset;
  if (off % kCacheLineBytes != 0 || off >= layout_.result_heap.bytes) {
    return Bad("release-result output_offset " + std::to_string(off) +
               " is not a 64-byte-aligned offset inside the result heap (" +
               std::to_string(layout_.result_heap.bytes) + " bytes)");
  }
  op_.release_offset = off;
  return OkStatus();
}

Status Validator::CheckName() {
  if (r_.name_len > kMaxNameBytes) {
    return Bad("name_len " + std::to_string(r_.name_len) + " exceeds " +
               std::to_string(kMaxNameBytes));
  }
  const void* nul = std::memchr(r_.name, '\0', r_.name_len);
  if (nul != nullptr) {
    return Bad("name contains a NUL byte at position " +
               std::to_string(static_cast<const char*>(nul) - r_.name));
  }
  op_.name.assign(r_.name, r_.name_len);
  if (!op_.name.empty()) {
    prefix_ = "submission (op id " + std::to_string(r_.op_id) + ", tensor \"" + op_.name + "\"): ";
  }
  return OkStatus();
}

Status Validator::CheckShape() {
  if (r_.ndims > kMaxDims) {
    return Bad("ndims " + std::to_string(r_.ndims) + " exceeds " + std::to_string(kMaxDims));
  }
  op_.shape.assign(r_.dims, r_.dims + r_.ndims);
  int64_t elems = 1;
  bool overflow = false;
  bool empty = false;
  for (int i = 0; i < r_.ndims; ++i) {
    if (r_.dims[i] < 0) {
      return Bad("dims[" + std::to_string(i) + "] is " + std::to_string(r_.dims[i]) + " (shape " +
                 Shape(op_.shape) + "), must be >= 0");
    }
    // The product of the non-zero dimensions must fit too, so that no partial product computed
    // later (in any order) overflows.
    if (r_.dims[i] == 0) {
      empty = true;
    } else if (!overflow && __builtin_mul_overflow(elems, r_.dims[i], &elems)) {
      overflow = true;
    }
  }
  int64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(elems, static_cast<int64_t>(elem_bytes_), &bytes)) {
    return Bad("shape " + Shape(op_.shape) + " of " + DataTypeName(op_.dtype) +
               " overflows 64 bits");
  }
  if (empty) elems = bytes = 0;
  op_.num_elements = elems;
  if (r_.input_bytes != static_cast<uint64_t>(bytes)) {
    return Bad("input_bytes " + std::to_string(r_.input_bytes) + " does not match shape " +
               Shape(op_.shape) + " of " + DataTypeName(op_.dtype) + " (" + std::to_string(bytes) +
               " bytes)");
  }
  return OkStatus();
}

Status Validator::CheckRange(const char* field, uint64_t offset, uint64_t bytes,
                             Region* out) const {
  if (!layout_.client_heap.Contains(offset, bytes)) {
    return Bad(std::string(field) + " range " + Range(offset, bytes) +
               " lies outside the client heap (" + std::to_string(layout_.client_heap.bytes) +
               " bytes)");
  }
  if (offset % elem_bytes_ != 0) {
    return Bad(std::string(field) + "_offset " + std::to_string(offset) + " is not aligned to " +
               std::to_string(elem_bytes_) + " bytes (" + DataTypeName(op_.dtype) + ")");
  }
  *out = Region{offset, bytes};
  return OkStatus();
}

Status Validator::CheckTensorRanges() {
  const char* type = RecordOpTypeName(op_.type);
  if (op_.shape.empty() &&
      (op_.type == RecordOpType::kAllgather || op_.type == RecordOpType::kAlltoall ||
       op_.type == RecordOpType::kReduceScatter)) {
    return Bad(std::string(type) + " needs a tensor with at least one dimension (ndims is 0)");
  }
  KV_RETURN_IF_ERROR(CheckRange("input", r_.input_offset, r_.input_bytes, &op_.input));
  op_.output_in_result_heap = (r_.flags & kSubmitOutputInResultHeap) != 0;
  if (op_.output_in_result_heap) {
    if (r_.output_offset != 0 || r_.output_bytes != 0) {
      return Bad("output_offset " + std::to_string(r_.output_offset) + " and output_bytes " +
                 std::to_string(r_.output_bytes) +
                 " must be 0 when the sidecar allocates the output (result heap flag)");
    }
    return OkStatus();
  }
  KV_RETURN_IF_ERROR(CheckRange("output", r_.output_offset, r_.output_bytes, &op_.output));
  const bool same_shape =
      op_.type == RecordOpType::kAllreduce || op_.type == RecordOpType::kBroadcast;
  if (same_shape && op_.output.bytes != op_.input.bytes) {
    return Bad("output_bytes " + std::to_string(op_.output.bytes) + " differs from input_bytes " +
               std::to_string(op_.input.bytes) + " (" + type + " output has the input's shape)");
  }
  const bool in_place = same_shape && op_.output.offset == op_.input.offset;
  if (!in_place && !Disjoint(op_.input, op_.output)) {
    return Bad("output range " + Range(op_.output.offset, op_.output.bytes) +
               " overlaps input range " + Range(op_.input.offset, op_.input.bytes) +
               (same_shape ? " (in place needs the same offset)" : ""));
  }
  return OkStatus();
}

Status Validator::CheckNoTensor() {
  const std::string type = RecordOpTypeName(op_.type);
  if (r_.ndims != 0)
    return Bad(type + " takes no tensor, but ndims is " + std::to_string(r_.ndims));
  if (r_.input_offset != 0 || r_.input_bytes != 0 || r_.output_offset != 0 ||
      r_.output_bytes != 0) {
    return Bad(type + " takes no tensor, but input " + Range(r_.input_offset, r_.input_bytes) +
               " / output " + Range(r_.output_offset, r_.output_bytes) + " is set");
  }
  if ((r_.flags & kSubmitOutputInResultHeap) != 0) {
    return Bad(type + " takes no tensor, but flags ask for a result-heap output");
  }
  op_.num_elements = 0;
  return OkStatus();
}

Status Validator::CheckSplits() {
  const uint32_t n = r_.num_splits;
  if (op_.type != RecordOpType::kAlltoall) {
    if (n != 0) {
      return Bad("num_splits " + std::to_string(n) + " given for " + RecordOpTypeName(op_.type) +
                 " (only alltoall takes splits)");
    }
    return OkStatus();
  }
  if (n == 0) return OkStatus();
  if (n > kMaxSplits) {
    return Bad("num_splits " + std::to_string(n) + " exceeds " + std::to_string(kMaxSplits));
  }
  op_.splits.resize(n);
  if (n <= static_cast<uint32_t>(kMaxInlineSplits)) {
    std::memcpy(op_.splits.data(), r_.splits, n * sizeof(int64_t));
  } else {
    const uint64_t off = r_.splits_offset;
    const uint64_t bytes = uint64_t{n} * sizeof(int64_t);
    if (off % sizeof(int64_t) != 0 || !layout_.client_heap.Contains(off, bytes)) {
      return Bad("splits_offset " + std::to_string(off) + " for " + std::to_string(n) +
                 " splits is not an 8-byte-aligned range inside the client heap (" +
                 std::to_string(layout_.client_heap.bytes) + " bytes)");
    }
    if (client_heap_.size() != layout_.client_heap.bytes) {
      return Internal(prefix_ + "client heap mapping of " + std::to_string(client_heap_.size()) +
                      " bytes does not match the layout (" +
                      std::to_string(layout_.client_heap.bytes) + ")");
    }
    // Copy first, then check the copy: the client may still be writing.
    std::memcpy(op_.splits.data(), client_heap_.data() + off, bytes);
  }
  int64_t sum = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const int64_t v = op_.splits[i];
    if (v < 0) {
      return Bad("splits[" + std::to_string(i) + "] is " + std::to_string(v) + ", must be >= 0");
    }
    if (__builtin_add_overflow(sum, v, &sum)) {
      return Bad("splits overflow 64 bits at splits[" + std::to_string(i) + "]");
    }
  }
  if (sum != op_.shape[0]) {
    return Bad("splits sum to " + std::to_string(sum) + " but dims[0] is " +
               std::to_string(op_.shape[0]));
  }
  return OkStatus();
}

Status Validator::CheckGroup() {
  if (r_.group_size == 0) return OkStatus();
  if (r_.group_size > kMaxGroupSize) {
    return Bad("group_size " + std::to_string(r_.group_size) + " exceeds " +
               std::to_string(kMaxGroupSize));
  }
  if (op_.type != RecordOpType::kAllreduce) {
    return Bad("group_size " + std::to_string(r_.group_size) + " given for " +
               RecordOpTypeName(op_.type) + " (groups are allreduce only)");
  }
  op_.group_id = r_.group_id;
  op_.group_size = r_.group_size;
  return OkStatus();
}

Status Validator::CheckDeviceBuffer(const char* which, const DeviceBufferRecord& b,
                                    uint64_t bytes) const {
  const std::string f = std::string("device ") + which;
  if (b.allocation_bytes == 0) return Bad(f + " allocation_bytes is 0");
  if (b.reserved != 0) return Bad(f + " reserved is " + std::to_string(b.reserved) + ", must be 0");
  if (b.handle_kind != kDeviceHandleIpc && b.handle_kind != kDeviceHandleExported) {
    return Bad(f + " handle_kind " + std::to_string(b.handle_kind) + " is unknown");
  }
  if (b.handle_kind == kDeviceHandleExported) {
    for (size_t i = 8; i < sizeof b.mem_handle; ++i) {
      if (b.mem_handle[i] != 0) return Bad(f + " exported handle has bytes after its export id");
    }
  }
  if (b.offset > b.allocation_bytes || bytes > b.allocation_bytes - b.offset) {
    return Bad(f + " tensor of " + std::to_string(bytes) + " bytes at offset " +
               std::to_string(b.offset) + " lies outside its allocation of " +
               std::to_string(b.allocation_bytes) + " bytes");
  }
  if (b.offset % elem_bytes_ != 0) {
    return Bad(f + " offset " + std::to_string(b.offset) + " is not aligned to " +
               std::to_string(elem_bytes_) + " bytes (" + DataTypeName(op_.dtype) + ")");
  }
  return OkStatus();
}

Status Validator::CheckDeviceTensor() {
  const char* type = RecordOpTypeName(op_.type);
  const bool same_shape =
      op_.type == RecordOpType::kAllreduce || op_.type == RecordOpType::kBroadcast;
  if (!same_shape && op_.type != RecordOpType::kAllgather &&
      op_.type != RecordOpType::kReduceScatter && op_.type != RecordOpType::kAlltoall) {
    return Bad(std::string("device tensors: ") + type +
               " takes no tensor (allreduce, broadcast, allgather, alltoall and reducescatter "
               "do)");
  }
  if (!same_shape && op_.shape.empty()) {
    return Bad(std::string(type) + " needs a tensor with at least one dimension (ndims is 0)");
  }
  if ((r_.flags & kSubmitOutputInResultHeap) != 0) {
    return Bad("device tensors cannot have their output in the result heap");
  }
  if (r_.output_offset != 0 || (same_shape && r_.output_bytes != 0)) {
    return Bad("output_offset " + std::to_string(r_.output_offset) + " and output_bytes " +
               std::to_string(r_.output_bytes) +
               " must be 0 for device tensors of the input's shape (the descriptor names the "
               "output)");
  }
  const uint64_t out_bytes = same_shape ? r_.input_bytes : r_.output_bytes;
  const uint64_t off = r_.input_offset;
  constexpr uint64_t size = sizeof(DeviceTensorDescriptor);
  if (off % 8 != 0 || !layout_.client_heap.Contains(off, size)) {
    return Bad("device descriptor at input_offset " + std::to_string(off) +
               " is not an 8-byte-aligned range of " + std::to_string(size) +
               " bytes inside the client heap (" + std::to_string(layout_.client_heap.bytes) +
               " bytes)");
  }
  if (client_heap_.size() != layout_.client_heap.bytes) {
    return Internal(prefix_ + "client heap mapping does not match the layout");
  }
  // Copy first, then check the copy: the client may still be writing.
  std::memcpy(&op_.device, client_heap_.data() + off, size);
  const DeviceTensorDescriptor& d = op_.device;
  if ((d.flags & ~kDeviceKnownFlags) != 0) {
    return Bad("device descriptor flags " + std::to_string(d.flags) + " has unknown bits");
  }
  size_t at = 0;
  if (d.reserved0 != 0 ||
      !AllZero(reinterpret_cast<const uint8_t*>(d.reserved1), sizeof(d.reserved1), &at)) {
    return Bad("device descriptor reserved bytes must be 0");
  }
  KV_RETURN_IF_ERROR(CheckDeviceBuffer("input", d.input, r_.input_bytes));
  KV_RETURN_IF_ERROR(CheckDeviceBuffer("output", d.output, out_bytes));
  const bool same_allocation = d.input.allocation_base == d.output.allocation_base;
  const bool in_place = same_shape && d.input.offset == d.output.offset;
  if (same_allocation && !in_place && d.input.offset < d.output.offset + out_bytes &&
      d.output.offset < d.input.offset + r_.input_bytes) {
    return Bad("device output overlaps the device input" +
               std::string(same_shape ? " (in place needs the same offset)" : ""));
  }
  op_.on_device = true;
  op_.device_output_bytes = out_bytes;
  op_.input = Region{off, size};
  op_.output = Region{};
  return OkStatus();
}

StatusOr<ValidatedOp> Validator::Run() {
  op_.op_id = r_.op_id;
  KV_RETURN_IF_ERROR(CheckCommon());
  op_.kind = r_.kind;
  if (r_.kind == RecordKind::kReleaseResult) {
    KV_RETURN_IF_ERROR(CheckRelease());
    return std::move(op_);
  }
  KV_RETURN_IF_ERROR(CheckName());
  if (static_cast<uint8_t>(r_.op_type) >= kRecordOpTypeCount) {
    return Bad("op_type " + std::to_string(static_cast<unsigned>(r_.op_type)) +
               " is not an op type (0-" + std::to_string(kRecordOpTypeCount - 1) + ")");
  }
  op_.type = r_.op_type;
  if (static_cast<uint8_t>(r_.dtype) >= kRecordDataTypeCount) {
    return Bad("dtype " + std::to_string(static_cast<unsigned>(r_.dtype)) +
               " is not a data type (0-" + std::to_string(kRecordDataTypeCount - 1) + ")");
  }
  op_.dtype = r_.dtype;
  elem_bytes_ = DataTypeSize(op_.dtype);
  if (static_cast<uint8_t>(r_.reduce_op) >= kRecordReduceOpCount) {
    return Bad("reduce_op " + std::to_string(static_cast<unsigned>(r_.reduce_op)) +
               " is not a reduce op (0-" + std::to_string(kRecordReduceOpCount - 1) + ")");
  }
  op_.reduce_op = r_.reduce_op;
  if (!std::isfinite(r_.prescale)) return Bad("prescale " + Num(r_.prescale) + " is not finite");
  if (!std::isfinite(r_.postscale)) {
    return Bad("postscale " + Num(r_.postscale) + " is not finite");
  }
  op_.prescale = r_.prescale;
  op_.postscale = r_.postscale;
  if (r_.process_set < 0) {
    return Bad("process_set " + std::to_string(r_.process_set) + " is negative");
  }
  op_.process_set = r_.process_set;
  if (op_.type == RecordOpType::kBroadcast && r_.root < 0) {
    return Bad("root " + std::to_string(r_.root) + " is negative");
  }
  op_.root = op_.type == RecordOpType::kBroadcast ? r_.root : 0;

  if ((r_.flags & kSubmitDeviceTensor) != 0) {
    KV_RETURN_IF_ERROR(CheckShape());
    KV_RETURN_IF_ERROR(CheckDeviceTensor());
  } else if (op_.type == RecordOpType::kBarrier || op_.type == RecordOpType::kJoin) {
    KV_RETURN_IF_ERROR(CheckNoTensor());
  } else {
    KV_RETURN_IF_ERROR(CheckShape());
    KV_RETURN_IF_ERROR(CheckTensorRanges());
  }
  KV_RETURN_IF_ERROR(CheckSplits());
  KV_RETURN_IF_ERROR(CheckGroup());
  return std::move(op_);
}

}  // namespace

Status ValidateCompletion(const CompletionRecord& record, const ArenaLayout& layout) {
  CompletionRecord r;
  std::memcpy(&r, &record, sizeof(r));
  const std::string prefix = "completion (op id " + std::to_string(r.op_id) + "): ";
  auto bad = [&prefix](const std::string& what) { return Internal(prefix + what); };
  if (r.status >= kRecordStatusCodeCount) {
    return bad("status " + std::to_string(r.status) + " is not a status code");
  }
  if (r.message_len > kMaxMessageBytes) {
    return bad("message_len " + std::to_string(r.message_len) + " exceeds " +
               std::to_string(kMaxMessageBytes));
  }
  if (r.ndims > kMaxDims) {
    return bad("ndims " + std::to_string(r.ndims) + " exceeds " + std::to_string(kMaxDims));
  }
  for (int i = 0; i < r.ndims; ++i) {
    if (r.dims[i] < 0) {
      return bad("dims[" + std::to_string(i) + "] is " + std::to_string(r.dims[i]));
    }
  }
  const bool in_result = (r.flags & kCompleteOutputInResultHeap) != 0;
  const Region& heap = in_result ? layout.result_heap : layout.client_heap;
  if (!heap.Contains(r.output_offset, r.output_bytes)) {
    return bad(std::string("output range ") + Range(r.output_offset, r.output_bytes) +
               " lies outside the " + (in_result ? "result" : "client") + " heap (" +
               std::to_string(heap.bytes) + " bytes)");
  }
  if (r.num_received_splits > kMaxSplits) {
    return bad("num_received_splits " + std::to_string(r.num_received_splits) + " exceeds " +
               std::to_string(kMaxSplits));
  }
  const bool splits_in_heap = (r.flags & kCompleteSplitsInResultHeap) != 0;
  if (splits_in_heap != (r.num_received_splits > static_cast<uint32_t>(kMaxInlineSplits))) {
    return bad("num_received_splits " + std::to_string(r.num_received_splits) +
               " disagrees with the splits-in-result-heap flag");
  }
  if (splits_in_heap &&
      (r.received_splits_offset % sizeof(int64_t) != 0 ||
       !layout.result_heap.Contains(r.received_splits_offset,
                                    uint64_t{r.num_received_splits} * sizeof(int64_t)))) {
    return bad("received_splits_offset " + std::to_string(r.received_splits_offset) +
               " is not an 8-byte-aligned range inside the result heap");
  }
  return OkStatus();
}

StatusOr<ValidatedOp> ValidateSubmission(const SubmissionRecord& record, const ArenaLayout& layout,
                                         std::span<const std::byte> client_heap) {
  // Work on a private copy: if `record` still lies in shared memory, every field is read once.
  SubmissionRecord copy;
  std::memcpy(&copy, &record, sizeof(copy));
  return Validator(copy, layout, client_heap).Run();
}

}  // namespace korovod::sidecar
