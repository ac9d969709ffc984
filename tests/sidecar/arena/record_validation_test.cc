// Decoding untrusted submission records: valid records of every kind pass, each bad field is
// refused with a message naming it and the op id, and a seeded fuzz run over random bytes and
// field mutations never crashes and never accepts a range outside the client heap.
#include "sidecar/arena/record_validation.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tests/sidecar/arena/protocol_test_util.h"

namespace korovod::sidecar {
namespace {

using testing::FloatSumAllreduce;

constexpr uint64_t kHeap = 1 << 20;

ArenaLayout Layout() {
  ArenaSizes s;
  s.submission_slots = 8;
  s.completion_slots = 8;
  s.client_heap_bytes = kHeap;
  s.result_heap_bytes = kHeap;
  return *ComputeArenaLayout(s);
}

// allreduce of float32 [4, 8] named "grad", op id 42, input at 0, output at 4096.
SubmissionRecord Allreduce() {
  SubmissionRecord r = FloatSumAllreduce(42, {4, 8}, 0, 4096);
  r.reduce_op = RecordReduceOp::kAverage;
  r.postscale = 0.5;
  EXPECT_TRUE(SetName(r, "grad").ok());
  return r;
}

SubmissionRecord Alltoall(uint32_t splits) {
  SubmissionRecord r = Allreduce();
  r.op_type = RecordOpType::kAlltoall;
  r.dims[0] = splits * 2;
  r.dims[1] = 8;
  r.input_bytes = splits * 2 * 8 * 4;
  r.output_offset = 0;
  r.output_bytes = 0;
  r.flags = kSubmitOutputInResultHeap;
  r.num_splits = splits;
  if (splits <= kMaxInlineSplits) {
    for (uint32_t i = 0; i < splits; ++i) r.splits[i] = 2;
  } else {
    r.splits_offset = kHeap / 2;
  }
  return r;
}

SubmissionRecord NoTensor(RecordOpType t) {
  SubmissionRecord r{};
  r.op_id = 42;
  r.kind = RecordKind::kOp;
  r.op_type = t;
  return r;
}

class ValidationTest : public ::testing::Test {
 protected:
  ValidationTest() : layout_(Layout()), heap_(kHeap) {
    // 1000 splits of 2 at the middle of the heap, for Alltoall(1000).
    for (int i = 0; i < 1000; ++i) {
      const int64_t two = 2;
      std::memcpy(heap_.data() + kHeap / 2 + i * 8, &two, 8);
    }
  }
  StatusOr<ValidatedOp> Validate(const SubmissionRecord& r) {
    return ValidateSubmission(r, layout_, heap_);
  }
  ArenaLayout layout_;
  std::vector<std::byte> heap_;
};

struct BadCompletion {
  std::function<void(CompletionRecord&)> mutate;
  const char* expect;
};

TEST_F(ValidationTest, AcceptsValidRecordsOfEveryKind) {
  auto v = Validate(Allreduce());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->op_id, 42u);
  EXPECT_EQ(v->name, "grad");
  EXPECT_EQ(v->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(v->num_elements, 32);
  EXPECT_EQ(v->reduce_op, RecordReduceOp::kAverage);
  EXPECT_EQ(v->postscale, 0.5);
  EXPECT_EQ(v->input, (Region{0, 128}));
  EXPECT_EQ(v->output, (Region{4096, 128}));
  EXPECT_FALSE(v->output_in_result_heap);

  SubmissionRecord r = Allreduce();
  r.output_offset = r.input_offset;  // in place
  EXPECT_TRUE(Validate(r).ok());

  r = Allreduce();
  r.ndims = 0;  // scalar
  r.input_bytes = r.output_bytes = 4;
  EXPECT_TRUE(Validate(r).ok());

  r = Allreduce();
  r.dims[0] = 0;  // empty tensor
  r.input_bytes = r.output_bytes = 0;
  v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->num_elements, 0);

  r = Allreduce();
  r.name_len = 0;  // the engine names it
  EXPECT_TRUE(Validate(r).ok());

  r = Allreduce();
  r.group_id = 9;
  r.group_size = 3;
  v = Validate(r);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->group_size, 3u);
  EXPECT_EQ(v->group_id, 9u);

  r = Allreduce();
  r.op_type = RecordOpType::kBroadcast;
  r.root = 3;
  v = Validate(r);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->root, 3);

  for (RecordOpType t : {RecordOpType::kAllgather, RecordOpType::kReduceScatter}) {
    r = Allreduce();
    r.op_type = t;
    r.flags = kSubmitOutputInResultHeap;
    r.output_offset = r.output_bytes = 0;
    v = Validate(r);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->output_in_result_heap);
    r.flags = 0;
    r.output_offset = 8192;
    r.output_bytes = 100000;  // a capacity
    EXPECT_TRUE(Validate(r).ok());
  }

  v = Validate(Alltoall(4));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->splits, std::vector<int64_t>(4, 2));
  r = Alltoall(4);
  r.num_splits = 0;  // even split
  EXPECT_TRUE(Validate(r).ok());
  v = Validate(Alltoall(1000));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->splits, std::vector<int64_t>(1000, 2));

  for (RecordOpType t : {RecordOpType::kBarrier, RecordOpType::kJoin}) {
    v = Validate(NoTensor(t));
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->num_elements, 0);
  }

  r = SubmissionRecord{};
  r.kind = RecordKind::kReleaseResult;
  r.op_id = 5;
  r.output_offset = 640;
  v = Validate(r);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->kind, RecordKind::kReleaseResult);
  EXPECT_EQ(v->release_offset, 640u);

  for (DataType d : kAllDataTypes) {
    r = Allreduce();
    r.dtype = d;
    r.input_bytes = r.output_bytes = 32 * DataTypeSize(d);
    EXPECT_TRUE(Validate(r).ok()) << DataTypeName(d);
  }
}

struct BadCase {
  const char* what;
  std::function<void(SubmissionRecord&)> mutate;
  const char* expect;  // substring of the message
};

TEST_F(ValidationTest, RejectsEachBadFieldNamingIt) {
  const BadCase cases[] = {
      {"zeroed kind", [](auto& r) { r.kind = RecordKind::kInvalid; },
       "kind 0 is not a record kind"},
      {"kind", [](auto& r) { r.kind = static_cast<RecordKind>(9); }, "kind 9 is not"},
      {"flags", [](auto& r) { r.flags = 0x81; }, "flags 0x81 has unknown bits 0x80"},
      {"reserved", [](auto& r) { r.reserved[5] = 1; }, "reserved[5] is 1"},
      {"op_type", [](auto& r) { r.op_type = static_cast<RecordOpType>(7); },
       "op_type 7 is not an op type (0-6)"},
      {"dtype", [](auto& r) { r.dtype = static_cast<DataType>(11); },
       "dtype 11 is not a data type (0-10)"},
      {"reduce_op", [](auto& r) { r.reduce_op = static_cast<RecordReduceOp>(200); },
       "reduce_op 200 is not a reduce op"},
      {"ndims", [](auto& r) { r.ndims = 9; }, "ndims 9 exceeds 8"},
      {"dims", [](auto& r) { r.dims[1] = -8; }, "dims[1] is -8 (shape [4, -8]), must be >= 0"},
      {"overflow",
       [](auto& r) {
         r.ndims = 3;
         r.dims[0] = int64_t{1} << 40;
         r.dims[1] = int64_t{1} << 40;
         r.dims[2] = 0;  // zero elements, but the other dims still overflow
       },
       "overflows 64 bits"},
      {"bytes overflow",
       [](auto& r) {
         r.ndims = 1;
         r.dims[0] = int64_t{1} << 62;
       },
       "overflows 64 bits"},
      {"input_bytes", [](auto& r) { r.input_bytes = 127; },
       "input_bytes 127 does not match shape [4, 8] of float32 (128 bytes)"},
      {"input range", [](auto& r) { r.input_offset = kHeap - 64; },
       "input range [1048512, 1048512 + 128) lies outside the client heap (1048576 bytes)"},
      {"input wrap", [](auto& r) { r.input_offset = ~uint64_t{0} - 64; },
       "input range [18446744073709551551"},
      {"input alignment", [](auto& r) { r.input_offset = 2; },
       "input_offset 2 is not aligned to 4 bytes (float32)"},
      {"output range", [](auto& r) { r.output_offset = kHeap; }, "output range [1048576"},
      {"output alignment", [](auto& r) { r.output_offset = 4097; }, "output_offset 4097"},
      {"output_bytes", [](auto& r) { r.output_bytes = 256; },
       "output_bytes 256 differs from input_bytes 128"},
      {"partial overlap", [](auto& r) { r.output_offset = 64; },
       "output range [64, 64 + 128) overlaps input range [0, 0 + 128)"},
      {"result heap with offset",
       [](auto& r) {
         r.flags = kSubmitOutputInResultHeap;
         r.output_offset = 64;
       },
       "output_offset 64 and output_bytes 128 must be 0"},
      {"name_len", [](auto& r) { r.name_len = 201; }, "name_len 201 exceeds 200"},
      {"name NUL", [](auto& r) { r.name[2] = '\0'; }, "name contains a NUL byte at position 2"},
      {"process_set", [](auto& r) { r.process_set = -1; }, "process_set -1 is negative"},
      {"prescale", [](auto& r) { r.prescale = std::nan(""); }, "prescale nan is not finite"},
      {"postscale", [](auto& r) { r.postscale = -INFINITY; }, "postscale -inf is not finite"},
      {"root",
       [](auto& r) {
         r.op_type = RecordOpType::kBroadcast;
         r.root = -2;
       },
       "root -2 is negative"},
      {"allgather scalar",
       [](auto& r) {
         r.op_type = RecordOpType::kAllgather;
         r.ndims = 0;
         r.input_bytes = r.output_bytes = 4;
       },
       "allgather needs a tensor with at least one dimension (ndims is 0)"},
      {"splits on allreduce", [](auto& r) { r.num_splits = 2; },
       "num_splits 2 given for allreduce (only alltoall takes splits)"},
      {"group on allgather",
       [](auto& r) {
         r.op_type = RecordOpType::kAllgather;
         r.output_bytes = 1024;
         r.group_size = 2;
       },
       "group_size 2 given for allgather (groups are allreduce only)"},
      {"group_size", [](auto& r) { r.group_size = kMaxGroupSize + 1; },
       "group_size 65537 exceeds 65536"},
      {"barrier with shape",
       [](auto& r) {
         r = NoTensor(RecordOpType::kBarrier);
         r.ndims = 1;
       },
       "barrier takes no tensor, but ndims is 1"},
      {"join with input",
       [](auto& r) {
         r = NoTensor(RecordOpType::kJoin);
         r.input_bytes = 8;
       },
       "join takes no tensor, but input [0, 0 + 8)"},
      {"barrier result heap",
       [](auto& r) {
         r = NoTensor(RecordOpType::kBarrier);
         r.flags = kSubmitOutputInResultHeap;
       },
       "barrier takes no tensor, but flags ask for a result-heap output"},
      {"release alignment",
       [](auto& r) {
         r = SubmissionRecord{};
         r.op_id = 42;
         r.kind = RecordKind::kReleaseResult;
         r.output_offset = 65;
       },
       "release-result output_offset 65 is not a 64-byte-aligned offset inside the result heap"},
      {"release range",
       [](auto& r) {
         r = SubmissionRecord{};
         r.op_id = 42;
         r.kind = RecordKind::kReleaseResult;
         r.output_offset = kHeap;
       },
       "release-result output_offset 1048576"},
  };
  for (const BadCase& c : cases) {
    SubmissionRecord r = Allreduce();
    c.mutate(r);
    auto v = Validate(r);
    ASSERT_FALSE(v.ok()) << c.what;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(v.status().message().find("op id 42"), std::string::npos)
        << c.what << ": " << v.status().message();
    EXPECT_NE(v.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << v.status().message();
  }
}

TEST_F(ValidationTest, RejectsBadSplits) {
  const BadCase cases[] = {
      {"too many", [](auto& r) { r.num_splits = kMaxSplits + 1; }, "num_splits 65537 exceeds"},
      {"negative", [](auto& r) { r.splits[2] = -1; }, "splits[2] is -1, must be >= 0"},
      {"sum", [](auto& r) { r.splits[3] = 3; }, "splits sum to 9 but dims[0] is 8"},
      {"sum overflow",
       [](auto& r) {
         r.splits[0] = std::numeric_limits<int64_t>::max();
         r.splits[1] = std::numeric_limits<int64_t>::max();
       },
       "splits overflow 64 bits at splits[1]"},
  };
  for (const BadCase& c : cases) {
    SubmissionRecord r = Alltoall(4);
    c.mutate(r);
    auto v = Validate(r);
    ASSERT_FALSE(v.ok()) << c.what;
    EXPECT_NE(v.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << v.status().message();
  }
  SubmissionRecord r = Alltoall(1000);
  r.splits_offset = kHeap - 4000;
  auto v = Validate(r);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("splits_offset 1044576 for 1000 splits is not an "
                                      "8-byte-aligned range inside the client heap"),
            std::string::npos)
      << v.status().message();
  r.splits_offset = kHeap / 2 + 4;
  EXPECT_FALSE(Validate(r).ok());
  // Without the heap mapping, splits stored there cannot be read.
  v = ValidateSubmission(Alltoall(1000), layout_);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

// A device allreduce of float32 [4, 8]: the descriptor at heap offset 8192, both buffers in one
// allocation of 1 MiB (input at 0, output at 4096).
constexpr uint64_t kDescriptorAt = 8192;
SubmissionRecord DeviceAllreduce() {
  SubmissionRecord r = Allreduce();
  r.flags = kSubmitDeviceTensor;
  r.input_offset = kDescriptorAt;
  r.output_offset = 0;
  r.output_bytes = 0;
  return r;
}
DeviceTensorDescriptor Descriptor() {
  DeviceTensorDescriptor d{};
  d.device_uuid[0] = 7;
  d.flags = kDeviceReadyEvent;
  d.input.allocation_base = d.output.allocation_base = 0x7f0000000000;
  d.input.allocation_bytes = d.output.allocation_bytes = 1 << 20;
  d.output.offset = 4096;
  return d;
}

TEST_F(ValidationTest, DeviceTensorsNeedASoundDescriptor) {
  auto put = [&](const DeviceTensorDescriptor& d) {
    std::memcpy(heap_.data() + kDescriptorAt, &d, sizeof d);
  };
  put(Descriptor());
  auto ok = Validate(DeviceAllreduce());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->on_device);
  EXPECT_EQ(ok->input, (Region{kDescriptorAt, sizeof(DeviceTensorDescriptor)}));
  EXPECT_EQ(ok->device.output.offset, 4096u);
  EXPECT_EQ(ok->num_elements, 32);

  struct DeviceCase {
    const char* what;
    std::function<void(SubmissionRecord&, DeviceTensorDescriptor&)> mutate;
    const char* expect;
  };
  const DeviceCase cases[] = {
      {"barrier", [](auto& r, auto&) { r.op_type = RecordOpType::kBarrier; },
       "device tensors: barrier takes no tensor"},
      {"gather past its allocation",
       [](auto& r, auto& d) {
         r.op_type = RecordOpType::kAllgather;
         r.output_bytes = 1 << 20;  // capacity: the whole allocation, but the output is at 4096
         (void)d;
       },
       "device output tensor of 1048576 bytes at offset 4096 lies outside its allocation"},
      {"result heap", [](auto& r, auto&) { r.flags |= kSubmitOutputInResultHeap; },
       "cannot have their output in the result heap"},
      {"output set", [](auto& r, auto&) { r.output_bytes = 128; }, "must be 0 for device tensors"},
      {"descriptor outside", [](auto& r, auto&) { r.input_offset = kHeap - 64; },
       "is not an 8-byte-aligned range of 320 bytes inside the client heap"},
      {"descriptor unaligned", [](auto& r, auto&) { r.input_offset = kDescriptorAt + 4; },
       "is not an 8-byte-aligned range"},
      {"flags", [](auto&, auto& d) { d.flags = 6; }, "descriptor flags 6 has unknown bits"},
      {"reserved", [](auto&, auto& d) { d.reserved1[2] = 1; }, "reserved bytes must be 0"},
      {"empty allocation", [](auto&, auto& d) { d.input.allocation_bytes = 0; },
       "device input allocation_bytes is 0"},
      {"handle kind", [](auto&, auto& d) { d.output.handle_kind = 2; },
       "device output handle_kind 2 is unknown"},
      {"export id and more",
       [](auto&, auto& d) {
         d.input.handle_kind = kDeviceHandleExported;
         d.input.mem_handle[8] = 1;
       },
       "device input exported handle has bytes after its export id"},
      {"past the end", [](auto&, auto& d) { d.output.offset = (1 << 20) - 64; },
       "device output tensor of 128 bytes at offset 1048512 lies outside its allocation"},
      {"offset overflow", [](auto&, auto& d) { d.input.offset = ~uint64_t{0}; },
       "lies outside its allocation"},
      {"misaligned", [](auto&, auto& d) { d.input.offset = 2; }, "is not aligned to 4 bytes"},
      {"overlap", [](auto&, auto& d) { d.output.offset = 64; },
       "device output overlaps the device input"},
      {"shape", [](auto& r, auto&) { r.input_bytes = 100; }, "input_bytes 100 does not match"},
  };
  for (const DeviceCase& c : cases) {
    SubmissionRecord r = DeviceAllreduce();
    DeviceTensorDescriptor d = Descriptor();
    c.mutate(r, d);
    put(d);
    auto v = Validate(r);
    ASSERT_FALSE(v.ok()) << c.what;
    EXPECT_NE(v.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << v.status().message();
    EXPECT_NE(v.status().message().find("op id 42"), std::string::npos) << c.what;
  }
  // In place (same offset) and separate allocations are both fine; a broadcast too.
  DeviceTensorDescriptor d = Descriptor();
  d.output.offset = 0;
  put(d);
  EXPECT_TRUE(Validate(DeviceAllreduce()).ok());
  d.output.allocation_base += 1 << 20;
  d.output.offset = 64;
  put(d);
  SubmissionRecord b = DeviceAllreduce();
  b.op_type = RecordOpType::kBroadcast;
  EXPECT_TRUE(Validate(b).ok());
  // Allgather and reducescatter name their output's capacity in output_bytes.
  SubmissionRecord g = DeviceAllreduce();
  g.op_type = RecordOpType::kAllgather;
  g.output_bytes = 4 * 128;
  auto gv = Validate(g);
  ASSERT_TRUE(gv.ok()) << gv.status().ToString();
  EXPECT_EQ(gv->device_output_bytes, 512u);
}

TEST_F(ValidationTest, MessagesNameTheTensor) {
  SubmissionRecord r = Allreduce();
  r.dims[0] = -1;
  auto v = Validate(r);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message().rfind("submission (op id 42, tensor \"grad\"): dims[0] is -1", 0),
            0u)
      << v.status().message();
}

TEST_F(ValidationTest, CompletionsAreCheckedBeforeUse) {
  CompletionRecord c{};
  c.op_id = 9;
  c.flags = kCompleteOutputInResultHeap;
  c.output_offset = 4096;
  c.output_bytes = 1024;
  c.ndims = 1;
  c.dims[0] = 256;
  c.num_received_splits = 4;
  EXPECT_TRUE(ValidateCompletion(c, layout_).ok());
  c.num_received_splits = 100;
  c.flags |= kCompleteSplitsInResultHeap;
  c.received_splits_offset = 8192;
  EXPECT_TRUE(ValidateCompletion(c, layout_).ok());

  const BadCompletion cases[] = {
      {[](auto& c) { c.status = 9; }, "status 9 is not a status code"},
      {[](auto& c) { c.message_len = 401; }, "message_len 401 exceeds 400"},
      {[](auto& c) { c.ndims = 9; }, "ndims 9 exceeds 8"},
      {[](auto& c) { c.dims[0] = -3; }, "dims[0] is -3"},
      {[](auto& c) { c.output_offset = kHeap - 512; }, "lies outside the result heap"},
      {[](auto& c) {
         c.flags = kCompleteSplitsInResultHeap;  // output in the client heap
         c.output_bytes = kHeap;
       },
       "lies outside the client heap"},
      {[](auto& c) { c.num_received_splits = 10; }, "disagrees with the splits-in-result-heap"},
      {[](auto& c) { c.received_splits_offset = kHeap - 8; }, "received_splits_offset"},
      {[](auto& c) { c.num_received_splits = kMaxSplits + 1; }, "num_received_splits 65537"},
  };
  for (const BadCompletion& bc : cases) {
    CompletionRecord bad = c;
    bc.mutate(bad);
    Status s = ValidateCompletion(bad, layout_);
    ASSERT_FALSE(s.ok()) << bc.expect;
    EXPECT_NE(s.message().find("completion (op id 9): "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(bc.expect), std::string::npos) << s.message();
  }
}

// What every accepted op must satisfy, whatever bytes produced it.
void CheckInvariants(const ValidatedOp& op, const ArenaLayout& l) {
  if (op.kind == RecordKind::kReleaseResult) {
    ASSERT_LT(op.release_offset, l.result_heap.bytes);
    ASSERT_EQ(op.release_offset % 64, 0u);
    return;
  }
  ASSERT_EQ(op.kind, RecordKind::kOp);
  ASSERT_LT(static_cast<uint8_t>(op.type), kRecordOpTypeCount);
  ASSERT_LT(static_cast<uint8_t>(op.dtype), kRecordDataTypeCount);
  ASSERT_LT(static_cast<uint8_t>(op.reduce_op), kRecordReduceOpCount);
  ASSERT_LE(op.name.size(), kMaxNameBytes);
  ASSERT_EQ(op.name.find('\0'), std::string::npos);
  ASSERT_LE(op.shape.size(), static_cast<size_t>(kMaxDims));
  ASSERT_TRUE(std::isfinite(op.prescale) && std::isfinite(op.postscale));
  ASSERT_GE(op.process_set, 0);
  ASSERT_GE(op.root, 0);
  ASSERT_LE(op.input.offset, l.client_heap.bytes);
  ASSERT_LE(op.input.bytes, l.client_heap.bytes - op.input.offset);
  if (!op.output_in_result_heap) {
    ASSERT_LE(op.output.offset, l.client_heap.bytes);
    ASSERT_LE(op.output.bytes, l.client_heap.bytes - op.output.offset);
  } else {
    ASSERT_EQ(op.output, Region{});
  }
  int64_t elems = 1;
  for (int64_t d : op.shape) {
    ASSERT_GE(d, 0);
    elems *= d;  // no overflow: the validator guarantees the product fits
  }
  if (op.type == RecordOpType::kBarrier || op.type == RecordOpType::kJoin) {
    ASSERT_TRUE(op.shape.empty());
    ASSERT_EQ(op.input.bytes, 0u);
  } else {
    ASSERT_EQ(op.num_elements, elems);
    ASSERT_EQ(op.input.bytes, static_cast<uint64_t>(elems) * DataTypeSize(op.dtype));
    ASSERT_EQ(op.input.offset % DataTypeSize(op.dtype), 0u);
  }
  if (!op.splits.empty()) {
    ASSERT_EQ(op.type, RecordOpType::kAlltoall);
    int64_t sum = 0;
    for (int64_t s : op.splits) {
      ASSERT_GE(s, 0);
      sum += s;
    }
    ASSERT_EQ(sum, op.shape[0]);
  }
  if (op.group_size != 0) {
    ASSERT_EQ(op.type, RecordOpType::kAllreduce);
  }
}

TEST_F(ValidationTest, FuzzNeverCrashesNorAcceptsOutOfBounds) {
  std::mt19937_64 rng(20240611);
  // Heap contents for external splits: mostly 2s, some garbage.
  for (size_t i = kHeap / 2 + 8000; i < kHeap; ++i) heap_[i] = static_cast<std::byte>(rng());

  const std::vector<SubmissionRecord> seeds = [] {
    std::vector<SubmissionRecord> v = {Allreduce(), Alltoall(4), Alltoall(1000),
                                       NoTensor(RecordOpType::kBarrier),
                                       NoTensor(RecordOpType::kJoin)};
    SubmissionRecord rel{};
    rel.kind = RecordKind::kReleaseResult;
    rel.output_offset = 128;
    v.push_back(rel);
    SubmissionRecord g = Allreduce();
    g.op_type = RecordOpType::kAllgather;
    g.output_bytes = 4096;
    v.push_back(g);
    return v;
  }();
  const uint64_t interesting[] = {0,
                                  1,
                                  2,
                                  3,
                                  4,
                                  63,
                                  64,
                                  128,
                                  4096,
                                  kHeap - 128,
                                  kHeap - 64,
                                  kHeap - 1,
                                  kHeap,
                                  kHeap + 1,
                                  uint64_t{1} << 31,
                                  uint64_t{1} << 32,
                                  uint64_t{1} << 62,
                                  uint64_t{1} << 63,
                                  ~uint64_t{0},
                                  ~uint64_t{0} - 63,
                                  static_cast<uint64_t>(std::numeric_limits<int64_t>::max())};

  int accepted = 0;
  const int kIterations = 200000;
  const auto start = std::chrono::steady_clock::now();
  for (int it = 0; it < kIterations; ++it) {
    SubmissionRecord r;
    auto* bytes = reinterpret_cast<uint8_t*>(&r);
    if (it % 8 == 0) {
      for (size_t i = 0; i < sizeof(r); ++i) bytes[i] = static_cast<uint8_t>(rng());
      if (it % 16 == 0) bytes[offsetof(SubmissionRecord, kind)] = 1;  // get past the kind check
    } else {
      r = seeds[rng() % seeds.size()];
      const int mutations = 1 + static_cast<int>(rng() % 4);
      for (int m = 0; m < mutations; ++m) {
        switch (rng() % 4) {
          case 0: {  // one byte of the hot prefix (everything but the inline splits)
            bytes[rng() % offsetof(SubmissionRecord, splits)] = static_cast<uint8_t>(rng());
            break;
          }
          case 1: {  // one 8-byte word anywhere, to an interesting value
            const size_t word = rng() % (sizeof(r) / 8);
            const uint64_t v = interesting[rng() % std::size(interesting)];
            std::memcpy(bytes + word * 8, &v, 8);
            break;
          }
          case 2: {  // a small field to a small value
            const size_t at = rng() % 24;
            bytes[at] = static_cast<uint8_t>(rng() % 10);
            break;
          }
          default: {  // a dimension or split to an edge value
            const int64_t v = static_cast<int64_t>(interesting[rng() % std::size(interesting)]);
            if (rng() % 2 == 0) {
              r.dims[rng() % kMaxDims] = v;
            } else {
              r.splits[rng() % kMaxInlineSplits] = v;
            }
            break;
          }
        }
      }
    }
    auto v = Validate(r);
    if (v.ok()) {
      ++accepted;
      CheckInvariants(*v, layout_);
      if (::testing::Test::HasFatalFailure()) {
        FAIL() << "iteration " << it << " accepted an invalid record";
      }
    } else {
      ASSERT_EQ(v.status().code(), StatusCode::kInvalidArgument) << v.status().ToString();
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz: %d iterations, %d accepted, %.2f s\n", kIterations, accepted, seconds);
  EXPECT_GT(accepted, kIterations / 100);  // the mutations also explore valid records
}

}  // namespace
}  // namespace korovod::sidecar
