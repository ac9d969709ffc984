// The C function table over Client (c_api.h). Errors never leave as exceptions: every entry
// point catches and returns a status code.
#include "sidecar/client/c_api.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "sidecar/client/client.h"

struct KorovodOp {
  korovod::sidecar::ClientHandle handle;
};

namespace korovod::sidecar {
namespace {

void CopyMessage(const std::string& msg, char* out, size_t len) {
  if (out == nullptr || len == 0) return;
  const size_t n = std::min(msg.size(), len - 1);
  std::memcpy(out, msg.data(), n);
  out[n] = '\0';
}

int Fail(const Status& s, char* err, size_t len) {
  CopyMessage(s.ToString(), err, len);
  return static_cast<int>(s.code());
}

StatusOr<DataType> TypeOf(int dtype) {
  if (dtype < 0 || dtype > static_cast<int>(kLastDataType)) {
    return InvalidArgument("unknown korovod dtype " + std::to_string(dtype));
  }
  return static_cast<DataType>(dtype);
}

StatusOr<OpOptions> OptionsOf(const KorovodOpSpec& spec) {
  if (spec.reduce_op < 0 || spec.reduce_op > static_cast<int>(ReduceOp::kProduct)) {
    return InvalidArgument("unknown reduce op " + std::to_string(spec.reduce_op));
  }
  OpOptions o;
  if (spec.name != nullptr) o.name = spec.name;
  o.reduce_op = static_cast<ReduceOp>(spec.reduce_op);
  o.prescale = spec.prescale;
  o.postscale = spec.postscale;
  o.root = spec.root;
  o.process_set = spec.process_set;
  return o;
}

TensorShape ShapeOf(const KorovodOpSpec& spec) {
  if (spec.ndims <= 0 || spec.dims == nullptr) return TensorShape{};
  return TensorShape(spec.dims, spec.dims + spec.ndims);
}

// Alltoall's splits; empty: even.
std::vector<int64_t> SplitsOf(const KorovodOpSpec& spec) {
  if (spec.splits == nullptr || spec.num_splits <= 0) return {};
  return std::vector<int64_t>(spec.splits, spec.splits + spec.num_splits);
}

StatusOr<ClientHandle> Submit(Client& c, const KorovodOpSpec& spec) {
  auto options = OptionsOf(spec);
  if (!options.ok()) return options.status();
  if (spec.kind == KOROVOD_BARRIER) return c.Barrier(*options);
  if (spec.kind == KOROVOD_JOIN) return c.Join(*options);
  auto dtype = TypeOf(spec.dtype);
  if (!dtype.ok()) return dtype.status();
  const TensorShape shape = ShapeOf(spec);
  switch (spec.kind) {
    case KOROVOD_ALLREDUCE:
      return c.Allreduce(spec.input, spec.output, *dtype, shape, *options);
    case KOROVOD_ALLGATHER:
      return c.Allgather(spec.input, *dtype, shape, *options);
    case KOROVOD_BROADCAST:
      return c.Broadcast(spec.output, *dtype, shape, *options);
    case KOROVOD_ALLTOALL:
      return c.Alltoall(spec.input, *dtype, shape, SplitsOf(spec), *options);
    case KOROVOD_REDUCESCATTER:
      return c.ReduceScatter(spec.input, *dtype, shape, *options);
    default:
      return InvalidArgument("unknown op kind " + std::to_string(spec.kind));
  }
}

// One op handed out: the caller owns it until release(); or null with the code and message.
template <typename SubmitFn>
KorovodOp* HandOut(SubmitFn submit, int* code, char* err, size_t err_len) {
  try {
    auto h = submit();
    if (!h.ok()) {
      *code = Fail(h.status(), err, err_len);
      return nullptr;
    }
    auto op = std::make_unique<KorovodOp>();
    op->handle = std::move(h).value();
    *code = 0;
    return op.release();
  } catch (const std::exception& e) {
    *code = Fail(Internal(std::string("korovod client: ") + e.what()), err, err_len);
    return nullptr;
  }
}

KorovodOp* ApiSubmit(void* client, const KorovodOpSpec* spec, int* code, char* err,
                     size_t err_len) {
  return HandOut([&] { return Submit(*static_cast<Client*>(client), *spec); }, code, err, err_len);
}

int ApiSubmitGrouped(void* client, const KorovodOpSpec* specs, int n, KorovodOp** ops, char* err,
                     size_t err_len) {
  try {
    if (n <= 0) return Fail(InvalidArgument("a grouped allreduce needs tensors"), err, err_len);
    auto options = OptionsOf(specs[0]);
    if (!options.ok()) return Fail(options.status(), err, err_len);
    auto dtype = TypeOf(specs[0].dtype);
    if (!dtype.ok()) return Fail(dtype.status(), err, err_len);
    std::vector<GroupTensor> tensors(n);
    for (int i = 0; i < n; ++i) {
      if (specs[i].dtype != specs[0].dtype) {
        return Fail(InvalidArgument("a grouped allreduce takes one dtype"), err, err_len);
      }
      tensors[i].input = specs[i].input;
      tensors[i].output = specs[i].output;
      tensors[i].shape = ShapeOf(specs[i]);  // named <group name>.<i> by the client
    }
    auto handles = static_cast<Client*>(client)->GroupedAllreduce(tensors, *dtype, *options);
    if (!handles.ok()) return Fail(handles.status(), err, err_len);
    for (int i = 0; i < n; ++i) {
      auto op = std::make_unique<KorovodOp>();
      op->handle = std::move((*handles)[i]);
      ops[i] = op.release();
    }
    return 0;
  } catch (const std::exception& e) {
    return Fail(Internal(std::string("korovod client: ") + e.what()), err, err_len);
  }
}

DeviceTensorRef RefOf(const unsigned char (&uuid)[16], const KorovodDeviceBuffer& b) {
  DeviceTensorRef r;
  std::memcpy(r.device_uuid.data(), uuid, r.device_uuid.size());
  std::memcpy(r.mem_handle.data(), b.mem_handle, r.mem_handle.size());
  r.allocation_base = b.allocation_base;
  r.allocation_bytes = b.allocation_bytes;
  r.offset = b.offset;
  return r;
}

StatusOr<ClientHandle> SubmitDevice(Client& c, const KorovodOpSpec& spec,
                                    const KorovodDeviceSpec& dev) {
  auto options = OptionsOf(spec);
  if (!options.ok()) return options.status();
  auto dtype = TypeOf(spec.dtype);
  if (!dtype.ok()) return dtype.status();
  const TensorShape shape = ShapeOf(spec);
  const DeviceTensorRef in = RefOf(dev.device_uuid, dev.input);
  const DeviceTensorRef out = RefOf(dev.device_uuid, dev.output);
  DeviceEventHandle event;
  const DeviceEventHandle* ready = nullptr;
  if (dev.ready_event != nullptr) {
    std::memcpy(event.data(), dev.ready_event, event.size());
    ready = &event;
  }
  switch (spec.kind) {
    case KOROVOD_ALLREDUCE:
      return c.DeviceAllreduce(in, out, *dtype, shape, ready, *options);
    case KOROVOD_BROADCAST:
      return c.DeviceBroadcast(in, *dtype, shape, ready, *options);
    case KOROVOD_ALLGATHER:
      return c.DeviceAllgather(in, out, dev.output_bytes, *dtype, shape, ready, *options);
    case KOROVOD_ALLTOALL:
      return c.DeviceAlltoall(in, out, dev.output_bytes, *dtype, shape, SplitsOf(spec), ready,
                              *options);
    case KOROVOD_REDUCESCATTER:
      return c.DeviceReduceScatter(in, out, dev.output_bytes, *dtype, shape, ready, *options);
    default:
      return InvalidArgument("op kind " + std::to_string(spec.kind) + " has no device form");
  }
}

KorovodOp* ApiSubmitDevice(void* client, const KorovodOpSpec* spec, const KorovodDeviceSpec* dev,
                           int* code, char* err, size_t err_len) {
  return HandOut([&] { return SubmitDevice(*static_cast<Client*>(client), *spec, *dev); }, code,
                 err, err_len);
}

const char* ApiDeviceBackend(void* client) {
  return static_cast<Client*>(client)->device_backend().c_str();
}

int ApiSetPosition(void* client, int process_set, int* rank, int* size, char* err, size_t err_len) {
  auto p = static_cast<const Client*>(client)->ProcessSetPosition(process_set);
  if (!p.ok()) return Fail(p.status(), err, err_len);
  *rank = p->rank;
  *size = p->size;
  return 0;
}

void ApiOnDone(KorovodOp* op, KorovodDoneFn fn, void* arg) {
  op->handle.OnDone([fn, arg] { fn(arg); });
}

int ApiStatus(const KorovodOp* op, char* msg, size_t len) {
  const Status s = op->handle.status();
  if (s.ok()) {
    CopyMessage("", msg, len);
    return 0;
  }
  return Fail(s, msg, len);
}

int ApiNdims(const KorovodOp* op) { return static_cast<int>(op->handle.shape().size()); }
const int64_t* ApiDims(const KorovodOp* op) { return op->handle.shape().data(); }
const void* ApiOutput(const KorovodOp* op, uint64_t* bytes) {
  const auto out = op->handle.output();
  *bytes = out.size();
  return out.data();
}
const int64_t* ApiSplits(const KorovodOp* op, int* n) {
  const auto& s = op->handle.received_splits();
  *n = static_cast<int>(s.size());
  return s.data();
}
int ApiLastJoined(const KorovodOp* op) { return op->handle.last_joined_rank(); }
void ApiRelease(KorovodOp* op) { std::unique_ptr<KorovodOp> owned(op); }
int ApiRank(void* client) { return static_cast<Client*>(client)->rank(); }
int ApiSize(void* client) { return static_cast<Client*>(client)->size(); }

constexpr KorovodClientApi kApi = {
    KOROVOD_C_API_VERSION,
    ApiSubmit,
    ApiSubmitGrouped,
    ApiOnDone,
    ApiStatus,
    ApiNdims,
    ApiDims,
    ApiOutput,
    ApiSplits,
    ApiLastJoined,
    ApiRelease,
    ApiRank,
    ApiSize,
    ApiSubmitDevice,
    ApiDeviceBackend,
    ApiSetPosition,
};

}  // namespace
}  // namespace korovod::sidecar

extern "C" const KorovodClientApi* korovod_client_api(void) { return &korovod::sidecar::kApi; }
