#include "runtime/core/negotiation_messages.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace korovod {
namespace {

constexpr uint32_t kRequestMagic = 0x6b765251;   // "kvRQ"
constexpr uint32_t kResponseMagic = 0x6b765253;  // "kvRS"
// The fewest bytes one encoded entry takes: a declared count above left / this is corrupt, and
// is refused before anything is allocated for it.
constexpr size_t kMinRequestBytes = 43;
constexpr size_t kMinResponseBytes = 59;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  template <typename T>
  void PutVector(const std::vector<T>& v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const T& x : v) Put<T>(x);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const std::byte* data, size_t len) : p_(data), left_(len) {}
  template <typename T>
  bool Get(T& v) {
    if (left_ < sizeof(T)) return false;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    left_ -= sizeof(T);
    return true;
  }
  bool GetString(std::string& s) {
    uint32_t n = 0;
    if (!Get(n) || n > left_) return false;
    s.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return true;
  }
  bool GetString(std::string& s, uint32_t max) {
    uint32_t n = 0;
    if (!Peek(n) || n > max) return false;
    return GetString(s);
  }
  template <typename T>
  bool GetVector(std::vector<T>& v, uint32_t max) {
    uint32_t n = 0;
    if (!Get(n) || n > max || n > left_ / sizeof(T)) return false;
    v.resize(n);
    for (T& x : v) Get(x);
    return true;
  }
  template <typename E>
  bool GetEnum(E& e, uint8_t max) {
    uint8_t v = 0;
    if (!Get(v) || v > max) return false;
    e = static_cast<E>(v);
    return true;
  }
  size_t left() const { return left_; }
  template <typename T>
  bool Peek(T& v) const {
    if (left_ < sizeof(T)) return false;
    std::memcpy(&v, p_, sizeof(T));
    return true;
  }

 private:
  const std::byte* p_;
  size_t left_;
};

constexpr uint8_t kMaxOpType = static_cast<uint8_t>(OpType::kRemoveProcessSet);
constexpr uint8_t kMaxDataType = static_cast<uint8_t>(kLastDataType);
constexpr uint8_t kMaxReduceOp = static_cast<uint8_t>(ReduceOp::kProduct);

Status Corrupt(const char* what, size_t at) {
  return Internal(std::string("corrupt negotiation message: ") + what + " (" + std::to_string(at) +
                  " bytes left)");
}

template <typename R>
bool GetBool(R& rd, bool& out) {
  uint8_t b = 0;
  if (!rd.Get(b) || b > 1) return false;
  out = b != 0;
  return true;
}

// The sizes an entry's shape implies fit in 64 bits (the executors compute them unchecked).
bool ShapeFits(const TensorShape& shape, DataType dtype) {
  return NumBytes(shape, DataTypeSize(dtype)) >= 0;
}

bool AllNonNegative(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x >= 0; });
}

// An allgather's output: the rows of every rank times the bytes of a row.
bool AllgatherFits(const Response& r) {
  int64_t rows = 0;
  for (int64_t d : r.first_dims) {
    if (d < 0 || __builtin_add_overflow(rows, d, &rows)) return false;
  }
  TensorShape whole = r.shape;
  whole.insert(whole.begin(), rows);
  return ShapeFits(whole, r.dtype);
}

}  // namespace

size_t EncodedRequestBytes(const Request& r) {
  return 44 + r.name.size() + r.group.size() + r.shape.size() * sizeof(int64_t) +
         r.set_ranks.size() * sizeof(int32_t);
}

Status CheckRequestLimits(const Request& r) {
  const std::string who = "tensor \"" + r.name.substr(0, 256) + "\": ";
  if (r.name.size() > kMaxTensorNameBytes) {
    return InvalidArgument(who + "name of " + std::to_string(r.name.size()) +
                           " bytes is longer than " + std::to_string(kMaxTensorNameBytes));
  }
  if (r.group.size() > kMaxGroupNameBytes) {
    return InvalidArgument(who + "group name longer than " + std::to_string(kMaxGroupNameBytes));
  }
  if (r.shape.size() > kMaxTensorDims) {
    return InvalidArgument(who + std::to_string(r.shape.size()) + " dimensions, more than " +
                           std::to_string(kMaxTensorDims));
  }
  if (r.set_ranks.size() > kMaxEntryRanks) {
    return InvalidArgument(who + std::to_string(r.set_ranks.size()) + " set ranks, more than " +
                           std::to_string(kMaxEntryRanks));
  }
  if (!ShapeFits(r.shape, r.dtype)) {
    return InvalidArgument(who + "shape " + ShapeString(r.shape) + " of " +
                           DataTypeName(r.dtype) + " is negative or overflows 64 bits");
  }
  return OkStatus();
}

bool Request::SameAs(const Request& o) const {
  return type == o.type && name == o.name && dtype == o.dtype && shape == o.shape && op == o.op &&
         prescale == o.prescale && postscale == o.postscale && root == o.root && group == o.group &&
         group_size == o.group_size && set_ranks == o.set_ranks && on_device == o.on_device;
}

size_t Response::ByteSize() const { return NumElements(shape) * DataTypeSize(dtype); }

std::string EncodeRequests(const std::vector<Request>& requests) {
  Writer w;
  w.Put(kRequestMagic);
  w.Put<uint32_t>(static_cast<uint32_t>(requests.size()));
  for (const Request& r : requests) {
    w.Put(static_cast<uint8_t>(r.type));
    w.PutString(r.name);
    w.Put(static_cast<uint8_t>(r.dtype));
    w.PutVector(r.shape);
    w.Put(static_cast<uint8_t>(r.op));
    w.Put(r.prescale);
    w.Put(r.postscale);
    w.Put(r.root);
    w.PutString(r.group);
    w.Put(r.group_size);
    w.PutVector(r.set_ranks);
    w.Put<uint8_t>(r.on_device ? 1 : 0);
  }
  return w.Take();
}

StatusOr<std::vector<Request>> DecodeRequests(const std::byte* data, size_t len) {
  Reader rd(data, len);
  uint32_t magic = 0, n = 0;
  if (!rd.Get(magic) || magic != kRequestMagic) return Corrupt("bad request magic", rd.left());
  if (len > kMaxRequestPayloadBytes) return Corrupt("requests over the size limit", rd.left());
  if (!rd.Get(n) || n > rd.left() / kMinRequestBytes || n > kMaxRequestsPerMessage) {
    return Corrupt("bad request count", rd.left());
  }
  std::vector<Request> out(n);
  for (Request& r : out) {
    if (!rd.GetEnum(r.type, kMaxOpType) || !rd.GetString(r.name, kMaxTensorNameBytes) ||
        !rd.GetEnum(r.dtype, kMaxDataType) || !rd.GetVector(r.shape, kMaxTensorDims) ||
        !rd.GetEnum(r.op, kMaxReduceOp) || !rd.Get(r.prescale) || !rd.Get(r.postscale) ||
        !rd.Get(r.root) || !rd.GetString(r.group, kMaxGroupNameBytes) || !rd.Get(r.group_size) ||
        !rd.GetVector(r.set_ranks, kMaxEntryRanks) || !GetBool(rd, r.on_device)) {
      return Corrupt("truncated request, or a field over its limit", rd.left());
    }
    if (!ShapeFits(r.shape, r.dtype)) {
      return Corrupt(("request for a negative or 64-bit-overflowing shape " +
                      ShapeString(r.shape))
                         .c_str(),
                     rd.left());
    }
  }
  if (rd.left() != 0) return Corrupt("trailing bytes after requests", rd.left());
  return out;
}

std::string EncodeResponses(const ResponseList& list) {
  Writer w;
  w.Put(kResponseMagic);
  w.Put<uint8_t>(list.shutdown ? 1 : 0);
  w.PutString(list.shutdown_reason);
  w.Put<uint8_t>(list.tuning.has_value() ? 1 : 0);
  if (list.tuning) {
    w.Put(list.tuning->fusion_threshold_bytes);
    w.Put(list.tuning->cycle_time_ms);
    w.Put(list.tuning->small_allreduce_max_bytes);
    w.Put(list.tuning->tcp_stripe_min_bytes);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(list.responses.size()));
  for (const Response& r : list.responses) {
    w.Put(static_cast<uint8_t>(r.type));
    w.PutString(r.name);
    w.PutString(r.error);
    w.Put(static_cast<uint8_t>(r.dtype));
    w.PutVector(r.shape);
    w.PutVector(r.first_dims);
    w.Put(static_cast<uint8_t>(r.op));
    w.Put(r.prescale);
    w.Put(r.postscale);
    w.Put(r.root);
    w.PutString(r.group);
    w.Put(r.group_size);
    w.Put(r.last_joined_rank);
    w.PutVector(r.set_ranks);
    w.PutVector(r.absent);
    w.Put<uint8_t>(r.on_device ? 1 : 0);
  }
  return w.Take();
}

StatusOr<ResponseList> DecodeResponses(const std::byte* data, size_t len) {
  Reader rd(data, len);
  uint32_t magic = 0, n = 0;
  bool has_tuning = false;
  ResponseList list;
  if (!rd.Get(magic) || magic != kResponseMagic) return Corrupt("bad response magic", rd.left());
  // Flags are 0 or 1: one meaning has one encoding (what is accepted re-encodes to itself).
  if (!GetBool(rd, list.shutdown) || !rd.GetString(list.shutdown_reason) ||
      !GetBool(rd, has_tuning)) {
    return Corrupt("truncated response header", rd.left());
  }
  if (has_tuning) {
    TunableParams t;
    if (!rd.Get(t.fusion_threshold_bytes) || !rd.Get(t.cycle_time_ms) ||
        !rd.Get(t.small_allreduce_max_bytes) || !rd.Get(t.tcp_stripe_min_bytes)) {
      return Corrupt("truncated tuning", rd.left());
    }
    list.tuning = t;
  }
  if (!rd.Get(n) || n > rd.left() / kMinResponseBytes || n > kMaxResponsesPerMessage) {
    return Corrupt("bad response count", rd.left());
  }
  list.responses.resize(n);
  for (Response& r : list.responses) {
    if (!rd.GetEnum(r.type, kMaxOpType) || !rd.GetString(r.name, kMaxTensorNameBytes) ||
        !rd.GetString(r.error) || !rd.GetEnum(r.dtype, kMaxDataType) ||
        !rd.GetVector(r.shape, kMaxTensorDims) || !rd.GetVector(r.first_dims, kMaxEntryRanks) ||
        !rd.GetEnum(r.op, kMaxReduceOp) || !rd.Get(r.prescale) || !rd.Get(r.postscale) ||
        !rd.Get(r.root) || !rd.GetString(r.group, kMaxGroupNameBytes) || !rd.Get(r.group_size) ||
        !rd.Get(r.last_joined_rank) || !rd.GetVector(r.set_ranks, kMaxEntryRanks) ||
        !rd.GetVector(r.absent, kMaxEntryRanks) || !GetBool(rd, r.on_device)) {
      return Corrupt("truncated response, or a field over its limit", rd.left());
    }
    if (!ShapeFits(r.shape, r.dtype) || !AllNonNegative(r.first_dims) || !AllgatherFits(r)) {
      return Corrupt(("response for a negative or 64-bit-overflowing shape " +
                      ShapeString(r.shape) + " (allgather rows " + ShapeString(r.first_dims) +
                      ")")
                         .c_str(),
                     rd.left());
    }
  }
  if (rd.left() != 0) return Corrupt("trailing bytes after responses", rd.left());
  return list;
}

Status CheckResponsesForSet(const ResponseList& list, int set_size) {
  for (const Response& r : list.responses) {
    const std::string who = "tensor \"" + r.name.substr(0, 256) + "\": ";
    if (r.type == OpType::kAllgather && r.error.empty() &&
        r.first_dims.size() != static_cast<size_t>(set_size)) {
      return Internal(who + "allgather response lists the rows of " +
                      std::to_string(r.first_dims.size()) + " ranks in a set of " +
                      std::to_string(set_size));
    }
    if (r.type == OpType::kBroadcast && r.error.empty() && (r.root < 0 || r.root >= set_size)) {
      return Internal(who + "broadcast root " + std::to_string(r.root) + " is outside a set of " +
                      std::to_string(set_size));
    }
    for (int32_t q : r.absent) {
      if (q < 0 || q >= set_size) {
        return Internal(who + "absent rank " + std::to_string(q) + " is outside a set of " +
                        std::to_string(set_size));
      }
    }
    if (r.type == OpType::kJoin && (r.last_joined_rank < -1 || r.last_joined_rank >= set_size)) {
      return Internal("join response names rank " + std::to_string(r.last_joined_rank) +
                      " outside a set of " + std::to_string(set_size));
    }
  }
  return OkStatus();
}

}  // namespace korovod
