#include "sidecar/tensorflow/device_op.h"

#include <cstring>
#include <iterator>
#include <memory>
#include <utility>

#include "sidecar/tensorflow/client_session.h"

namespace korovod::tf {
namespace {

constexpr int kInvalidArgument = KOROVOD_INVALID_ARGUMENT;
constexpr int kInternal = KOROVOD_INTERNAL;
constexpr int kFailedPrecondition = 6;
constexpr int kInt64 = 3;  // korovod's DataType::kInt64
constexpr char kNotInitialized[] = "korovod has not been initialized; use hvd.init().";

// One op from its request to `done`: owned by whoever holds it next (the submitting call, then
// the completion callback of the op in flight), freed by Finish.
struct Run {
  TrainerGpu* gpu = nullptr;
  KorovodOpSpec spec{};
  std::string name;
  std::vector<int64_t> dims;
  std::vector<int64_t> splits;
  const void* input = nullptr;
  uint64_t input_bytes = 0;
  void* stream = nullptr;
  DeviceOpCalls calls;

  const KorovodClientApi* api = nullptr;
  KorovodOp* op = nullptr;  // in flight (the host prelude, then the device op)
  void* event = nullptr;    // the ready event, once recorded
  const void* event_on = nullptr;
  std::vector<int64_t> prelude;  // the host prelude's input: rows or splits

  uint64_t RowBytes() const {
    uint64_t b = DeviceElementBytes(spec.dtype);
    for (size_t i = 1; i < dims.size(); ++i) b *= static_cast<uint64_t>(dims[i]);
    return b;
  }
};

void Finish(Run* run, DeviceOpResult result) {
  std::unique_ptr<Run> owned(run);
  if (run->op != nullptr) run->api->release(run->op);
  if (run->event != nullptr) run->gpu->DestroyEvent(run->event_on, run->event);
  auto done = std::move(run->calls.done);
  owned.reset();
  done(std::move(result));
}

void Fail(Run* run, int code, std::string message) {
  DeviceOpResult r;
  r.code = code;
  r.message = std::move(message);
  Finish(run, std::move(r));
}

// The completed op's status; 0 with an empty message when it succeeded.
int OpStatus(Run* run, std::string* message) {
  char msg[1024] = {0};
  const int code = run->api->status(run->op, msg, sizeof(msg));
  *message = msg;
  return code;
}

void OnDeviceDone(void* arg) {
  auto* run = static_cast<Run*>(arg);
  run->calls.schedule([run] {
    DeviceOpResult r;
    r.code = OpStatus(run, &r.message);
    if (r.code == 0 && run->spec.kind == KOROVOD_ALLTOALL) {
      int n = 0;
      const int64_t* recv = run->api->received_splits(run->op, &n);
      r.received_splits.assign(recv, recv + n);
    }
    Finish(run, std::move(r));
  });
}

// Submits through the session, then (the session released: `then` may run at once and submit
// again) registers `then` for the op's completion.
template <typename SubmitFn>
void SubmitThen(Run* run, SubmitFn submit, KorovodDoneFn then) {
  int code = 0;
  char msg[1024] = {0};
  {
    auto lease = ClientSession::Get().Acquire();
    if (lease.api() == nullptr) {
      return Fail(run, kFailedPrecondition, kNotInitialized);
    }
    run->api = lease.api();
    run->op = submit(run->api, lease.client(), &code, msg);
  }
  if (run->op == nullptr) return Fail(run, code, msg);
  run->api->on_done(run->op, then, run);
}

// Device memory for an empty tensor, which has no allocation to export.
const void* NonEmpty(Run* run, const void* data, uint64_t bytes, std::string* err) {
  if (bytes > 0 && data != nullptr) return data;
  return run->calls.allocate_scratch(8, err);
}

// Allocates the output of `out_dims` (when not in place) and submits the device op.
void SubmitDevice(Run* run, std::vector<int64_t> out_dims) {
  std::string err;
  uint64_t bytes = DeviceElementBytes(run->spec.dtype);
  for (int64_t d : out_dims) bytes *= static_cast<uint64_t>(d);
  void* allocated = run->calls.allocate_output(out_dims, &err);
  if (allocated == nullptr && bytes > 0) return Fail(run, kInternal, "output: " + err);
  const void* input = NonEmpty(run, run->input, run->input_bytes, &err);
  void* output = const_cast<void*>(NonEmpty(run, allocated, bytes, &err));
  if (input == nullptr || output == nullptr) return Fail(run, kInternal, "scratch: " + err);
  if (run->spec.kind == KOROVOD_BROADCAST && bytes > 0) {
    // In place on the output: the root sends it, the others receive into it.
    err = run->gpu->CopyAsync(output, input, bytes, run->stream);
    if (!err.empty()) return Fail(run, kInternal, err);
  }
  KorovodDeviceSpec dev{};
  unsigned char out_uuid[16];
  err = run->gpu->Export(input, dev.device_uuid, &dev.input);
  if (err.empty()) err = run->gpu->Export(output, out_uuid, &dev.output);
  if (!err.empty()) return Fail(run, kInvalidArgument, err);
  if (std::memcmp(out_uuid, dev.device_uuid, sizeof(out_uuid)) != 0) {
    return Fail(run, kInvalidArgument,
                "the input and the output are on different devices; one device per rank");
  }
  if (run->spec.kind == KOROVOD_BROADCAST) dev.input = dev.output;
  dev.output_bytes = bytes;
  // After the output's allocation and the copy: what last used its memory, and the input's
  // producer, are queued before the event.
  unsigned char event[64];
  err = run->gpu->RecordEvent(output, run->stream, event, &run->event);
  if (!err.empty()) return Fail(run, kInternal, err);
  run->event_on = output;
  dev.ready_event = event;

  SubmitThen(
      run,
      [&](const KorovodClientApi* api, void* client, int* code, char* msg) {
        return api->submit_device(client, &run->spec, &dev, code, msg, 1024);
      },
      &OnDeviceDone);
}

// The host prelude completed: the output's first dimension from what it returned.
void OnPreludeDone(void* arg) {
  auto* run = static_cast<Run*>(arg);
  run->calls.schedule([run] {
    std::string message;
    const int code = OpStatus(run, &message);
    if (code != 0) return Fail(run, code, message);
    uint64_t bytes = 0;
    const auto* values = static_cast<const int64_t*>(run->api->output(run->op, &bytes));
    int64_t rows = 0;
    for (uint64_t i = 0; i < bytes / sizeof(int64_t); ++i) rows += values[i];
    run->api->release(run->op);
    run->op = nullptr;
    std::vector<int64_t> out = run->dims;
    out[0] = rows;
    SubmitDevice(run, std::move(out));
  });
}

// Submits the host op that tells this rank its output's first dimension.
void SubmitPrelude(Run* run, int kind, const char* suffix) {
  const std::string name = run->name.empty() ? std::string() : run->name + suffix;
  const int64_t n = static_cast<int64_t>(run->prelude.size());
  KorovodOpSpec s{};
  s.kind = kind;
  s.name = name.empty() ? nullptr : name.c_str();
  s.dtype = kInt64;
  s.ndims = 1;
  s.dims = &n;
  s.input = run->prelude.data();
  s.prescale = 1.0;
  s.postscale = 1.0;
  s.process_set = run->spec.process_set;
  SubmitThen(
      run,
      [&](const KorovodClientApi* api, void* client, int* code, char* msg) {
        return api->submit(client, &s, code, msg, 1024);
      },
      &OnPreludeDone);
}

// This rank's position in the op's process set.
bool Position(Run* run, int* rank, int* size) {
  auto lease = ClientSession::Get().Acquire();
  if (lease.api() == nullptr) {
    Fail(run, kFailedPrecondition, kNotInitialized);
    return false;
  }
  char msg[1024] = {0};
  const int code = lease.api()->process_set_position(lease.client(), run->spec.process_set, rank,
                                                     size, msg, sizeof(msg));
  if (code != 0) {
    Fail(run, code, msg);
    return false;
  }
  return true;
}

}  // namespace

uint64_t DeviceElementBytes(int dtype) {
  static constexpr uint64_t kBytes[] = {1, 1, 4, 8, 2, 2, 4, 8, 2, 2, 1};
  return dtype >= 0 && dtype < static_cast<int>(std::size(kBytes)) ? kBytes[dtype] : 0;
}

void RunDeviceOp(TrainerGpu* gpu, const DeviceOpRequest& request, DeviceOpCalls calls) {
  auto run = std::make_unique<Run>();
  run->gpu = gpu;
  run->spec = request.spec;
  if (request.spec.name != nullptr) run->name = request.spec.name;
  run->spec.name = run->name.empty() ? nullptr : run->name.c_str();
  run->dims.assign(request.spec.dims, request.spec.dims + request.spec.ndims);
  run->spec.dims = run->dims.data();
  if (request.spec.splits != nullptr) {
    run->splits.assign(request.spec.splits, request.spec.splits + request.spec.num_splits);
  }
  run->spec.splits = nullptr;  // alltoall's, once checked (or made even)
  run->spec.num_splits = 0;
  run->input = request.input;
  run->input_bytes = request.input_bytes;
  run->stream = request.stream;
  run->calls = std::move(calls);
  Run* r = run.release();  // freed by Finish
  if (DeviceElementBytes(r->spec.dtype) == 0) {
    return Fail(r, kInvalidArgument, "unsupported dtype " + std::to_string(r->spec.dtype));
  }
  const bool needs_rows = r->spec.kind == KOROVOD_ALLGATHER || r->spec.kind == KOROVOD_ALLTOALL ||
                          r->spec.kind == KOROVOD_REDUCESCATTER;
  if (needs_rows && r->dims.empty()) {
    return Fail(r, kInvalidArgument, "a tensor of rank 0 has no first dimension to split");
  }
  switch (r->spec.kind) {
    case KOROVOD_ALLREDUCE:
    case KOROVOD_BROADCAST:
      return SubmitDevice(r, r->dims);
    case KOROVOD_REDUCESCATTER: {
      int rank = 0;
      int size = 0;
      if (!Position(r, &rank, &size)) return;
      std::vector<int64_t> out = r->dims;
      out[0] = r->dims[0] / size + (rank < r->dims[0] % size ? 1 : 0);
      return SubmitDevice(r, std::move(out));
    }
    case KOROVOD_ALLGATHER:
      r->prelude = {r->dims[0]};
      return SubmitPrelude(r, KOROVOD_ALLGATHER, ".rows");
    case KOROVOD_ALLTOALL: {
      int rank = 0;
      int size = 0;
      if (!Position(r, &rank, &size)) return;
      if (r->splits.empty()) {
        if (r->dims[0] % size != 0) {
          return Fail(r, kInvalidArgument,
                      "splits not provided, but first dimension of tensor is not an even "
                      "multiple of the number of workers.");
        }
        r->splits.assign(size, r->dims[0] / size);
      }
      if (static_cast<int>(r->splits.size()) != size) {
        return Fail(r, kInvalidArgument,
                    "Number of entries in splits does not equal number of workers.");
      }
      int64_t sum = 0;
      for (int64_t s : r->splits) {
        if (s < 0) return Fail(r, kInvalidArgument, "alltoall splits must not be negative");
        sum += s;
      }
      if (sum > r->dims[0]) {
        return Fail(r, kInvalidArgument,
                    "Sum of splits entries is greater than the first dimension of tensor.");
      }
      r->dims[0] = sum;  // Horovod sends the rows the splits cover; the rest stay behind
      r->input_bytes = static_cast<uint64_t>(sum) * r->RowBytes();
      r->spec.splits = r->splits.data();
      r->spec.num_splits = size;
      r->prelude = r->splits;
      return SubmitPrelude(r, KOROVOD_ALLTOALL, ".splits");
    }
    default:
      return Fail(r, kInvalidArgument,
                  "op kind " + std::to_string(r->spec.kind) + " has no device form");
  }
}

}  // namespace korovod::tf
