// What ranks tell the coordinator (Request) and what it answers (Response), and their byte
// encoding for the negotiation collectives. Decoding checks every length: a corrupt message is an
// error, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "common/reduce_op.h"
#include "common/status.h"
#include "runtime/core/autotune/autotuner.h"
#include "runtime/core/op_request.h"

namespace korovod {

// One rank's report that a tensor is ready. Everything two ranks must agree on.
struct Request {
  OpType type = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  TensorShape shape;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  std::string group;  // grouped allreduce: released together once all group_size are ready
  int32_t group_size = 0;
  std::vector<int32_t> set_ranks;  // add-process-set
  bool on_device = false;          // the tensor is in device memory (OpRequest::device >= 0)

  // Same operation as far as the response cache is concerned.
  bool SameAs(const Request& o) const;
};

// The coordinator's decision about one tensor: run it (identically on every rank) or fail it.
struct Response {
  OpType type = OpType::kAllreduce;
  std::string name;
  std::string error;  // non-empty: every rank fails its op on this tensor with this message
  DataType dtype = DataType::kFloat32;
  TensorShape shape;                // allgather/alltoall: the dims after the first
  std::vector<int64_t> first_dims;  // allgather: rows contributed by each set rank
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  std::string group;
  int32_t group_size = 0;
  int32_t last_joined_rank = -1;
  std::vector<int32_t> set_ranks;
  // Set ranks that had joined without submitting this tensor: they contribute the op's identity
  // (allreduce, reducescatter) or no rows (allgather), and Average divides by the others.
  std::vector<int32_t> absent;
  bool on_device = false;  // every rank's tensor is in device memory

  size_t ByteSize() const;  // tensor bytes this rank moves into a fusion buffer (allreduce)
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;                // the engine stops on every rank after this cycle
  std::string shutdown_reason;          // e.g. the stall report
  std::optional<TunableParams> tuning;  // autotune: apply before executing this cycle
};

std::string EncodeRequests(const std::vector<Request>& requests);
StatusOr<std::vector<Request>> DecodeRequests(const std::byte* data, size_t len);
std::string EncodeResponses(const ResponseList& list);
StatusOr<ResponseList> DecodeResponses(const std::byte* data, size_t len);

}  // namespace korovod
