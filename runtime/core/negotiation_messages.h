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

// What a peer may declare in negotiation messages. The decoders refuse more before allocating
// anything for it, so a corrupt or hostile peer costs at most one message's bytes, and every size
// the executors compute from a decoded entry (elements x dtype size, allgather rows x row bytes)
// fits in 64 bits. Admission refuses the same of this rank's own ops (CheckRequest), so a healthy
// rank never sends what its peers would refuse.
//   - a tensor name: 4 KiB (the arena's records carry 200 bytes; TensorFlow's longest scoped
//     names are a few hundred); a group's name is its first member's plus "+N";
inline constexpr uint32_t kMaxTensorNameBytes = 4096;
inline constexpr uint32_t kMaxGroupNameBytes = kMaxTensorNameBytes + 16;
//   - dimensions: 64 (PyTorch's own limit; the arena carries 8);
inline constexpr uint32_t kMaxTensorDims = 64;
//   - ranks listed in one entry (set members, allgather rows, absent ranks): 2^20, the world
//     table's bound on a rank;
inline constexpr uint32_t kMaxEntryRanks = 1u << 20;
//   - requests a rank reports in one cycle: 2^18 (100x the tensors of the largest models; a
//     sidecar's queue holds at most 2^16 ops); more wait for the next cycle (TakeReportable);
inline constexpr uint32_t kMaxRequestsPerMessage = 1u << 18;
//   - one rank's encoded requests per cycle: 64 MiB (2^18 requests of 256 bytes; a request is
//     at most ~4.2 MiB, an add-process-set of 2^20 ranks), also checked before the gather sizes
//     its buffer by what the peers declared;
inline constexpr uint64_t kMaxRequestPayloadBytes = uint64_t{64} << 20;
//   - the coordinator's answer: 2^20 responses, 1 GiB (checked before the broadcast sizes its
//     buffer by the length the coordinator declared).
inline constexpr uint32_t kMaxResponsesPerMessage = 1u << 20;
inline constexpr uint64_t kMaxResponsePayloadBytes = uint64_t{1} << 30;

// Bytes `r` takes in EncodeRequests' output (the message header aside).
size_t EncodedRequestBytes(const Request& r);
// Checks one of this rank's requests against the caps above (InvalidArgument naming the tensor).
Status CheckRequestLimits(const Request& r);

std::string EncodeRequests(const std::vector<Request>& requests);
StatusOr<std::vector<Request>> DecodeRequests(const std::byte* data, size_t len);
std::string EncodeResponses(const ResponseList& list);
StatusOr<ResponseList> DecodeResponses(const std::byte* data, size_t len);
// What only the set's size can tell: allgather rows one per set rank, absent ranks in the set.
Status CheckResponsesForSet(const ResponseList& list, int set_size);

}  // namespace korovod
