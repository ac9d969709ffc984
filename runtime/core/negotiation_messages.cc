#include "runtime/core/negotiation_messages.h"

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
  template <typename T>
  bool GetVector(std::vector<T>& v) {
    uint32_t n = 0;
    if (!Get(n) || n > left_ / sizeof(T)) return false;
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

}  // namespace

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
  if (!rd.Get(n) || n > rd.left() / kMinRequestBytes) {
    return Corrupt("bad request count", rd.left());
  }
  std::vector<Request> out(n);
  for (Request& r : out) {
    if (!rd.GetEnum(r.type, kMaxOpType) || !rd.GetString(r.name) ||
        !rd.GetEnum(r.dtype, kMaxDataType) || !rd.GetVector(r.shape) ||
        !rd.GetEnum(r.op, kMaxReduceOp) || !rd.Get(r.prescale) || !rd.Get(r.postscale) ||
        !rd.Get(r.root) || !rd.GetString(r.group) || !rd.Get(r.group_size) ||
        !rd.GetVector(r.set_ranks) || !GetBool(rd, r.on_device)) {
      return Corrupt("truncated request", rd.left());
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
  uint8_t shutdown = 0, has_tuning = 0;
  ResponseList list;
  if (!rd.Get(magic) || magic != kResponseMagic) return Corrupt("bad response magic", rd.left());
  if (!rd.Get(shutdown) || !rd.GetString(list.shutdown_reason) || !rd.Get(has_tuning)) {
    return Corrupt("truncated response header", rd.left());
  }
  list.shutdown = shutdown != 0;
  if (has_tuning != 0) {
    TunableParams t;
    if (!rd.Get(t.fusion_threshold_bytes) || !rd.Get(t.cycle_time_ms) ||
        !rd.Get(t.small_allreduce_max_bytes) || !rd.Get(t.tcp_stripe_min_bytes)) {
      return Corrupt("truncated tuning", rd.left());
    }
    list.tuning = t;
  }
  if (!rd.Get(n) || n > rd.left() / kMinResponseBytes) {
    return Corrupt("bad response count", rd.left());
  }
  list.responses.resize(n);
  for (Response& r : list.responses) {
    if (!rd.GetEnum(r.type, kMaxOpType) || !rd.GetString(r.name) || !rd.GetString(r.error) ||
        !rd.GetEnum(r.dtype, kMaxDataType) || !rd.GetVector(r.shape) ||
        !rd.GetVector(r.first_dims) || !rd.GetEnum(r.op, kMaxReduceOp) || !rd.Get(r.prescale) ||
        !rd.Get(r.postscale) || !rd.Get(r.root) || !rd.GetString(r.group) ||
        !rd.Get(r.group_size) || !rd.Get(r.last_joined_rank) || !rd.GetVector(r.set_ranks) ||
        !rd.GetVector(r.absent) || !GetBool(rd, r.on_device)) {
      return Corrupt("truncated response", rd.left());
    }
  }
  if (rd.left() != 0) return Corrupt("trailing bytes after responses", rd.left());
  return list;
}

}  // namespace korovod
