// The CPU kernels of the korovod TensorFlow ops. Each is asynchronous: ComputeAsync submits to
// the sidecar client (the session korovod.tensorflow handed over) and returns; the client's
// completion callback hands the rest (outputs of a size known only now, then `done`) to the
// device's worker pool, so no thread waits per op and the graph runs the next ops meanwhile.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sidecar/tensorflow/client_session.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/threadpool.h"

namespace korovod::tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// korovod's DataType values (common/data_type.h), which this library does not include.
int KorovodDtype(DataType t) {
  switch (t) {
    case ::tensorflow::DT_UINT8:
      return 0;
    case ::tensorflow::DT_INT8:
      return 1;
    case ::tensorflow::DT_INT32:
      return 2;
    case ::tensorflow::DT_INT64:
      return 3;
    case ::tensorflow::DT_HALF:
      return 4;
    case ::tensorflow::DT_BFLOAT16:
      return 5;
    case ::tensorflow::DT_FLOAT:
      return 6;
    case ::tensorflow::DT_DOUBLE:
      return 7;
    case ::tensorflow::DT_INT16:
      return 8;
    case ::tensorflow::DT_UINT16:
      return 9;
    case ::tensorflow::DT_BOOL:
      return 10;
    default:
      return -1;
  }
}

constexpr int kInvalidArgument = 1;
constexpr int kFailedPrecondition = 6;

// Horovod's TensorFlow error types: a request this rank's sidecar refuses (bad splits, an
// unknown process set) is InvalidArgument; an op the ranks disagree on (shape, dtype, operation,
// a joined rank) FailedPrecondition; a lost peer, a closed session or a deadline UnknownError
// (hvd.elastic turns it into HorovodInternalError).
absl::Status StatusOf(int code, const std::string& what, const char* msg) {
  if (code == kInvalidArgument) return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
  if (code == kFailedPrecondition) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", msg));
  }
  return absl::UnknownError(absl::StrCat(what, ": ", msg));
}

std::vector<int64_t> Dims(const TensorShape& s) {
  std::vector<int64_t> d(s.dims());
  for (int i = 0; i < s.dims(); ++i) d[i] = s.dim_size(i);
  return d;
}

// What runs once an op has completed, on a worker thread: fills the outputs from the op.
using Finish = std::function<absl::Status(OpKernelContext*, const KorovodClientApi*, KorovodOp*)>;

// One or more submitted ops of one kernel invocation; `done` runs after the last completes.
struct Invocation {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  const KorovodClientApi* api;
  std::string what;
  std::vector<KorovodOp*> ops;
  Finish finish;             // for ops.size() == 1
  std::vector<Tensor> keep;  // inputs the sidecar reads until completion
  std::atomic<int> remaining{0};

  ~Invocation() {
    for (KorovodOp* op : ops) api->release(op);
  }

  void Complete() {
    absl::Status s;
    char msg[1024];
    for (KorovodOp* op : ops) {
      const int code = api->status(op, msg, sizeof(msg));
      if (code != 0) {
        s = StatusOf(code, what, msg);
        break;
      }
    }
    if (s.ok() && finish) s = finish(ctx, api, ops[0]);
    if (!s.ok()) ctx->SetStatus(s);
    auto d = std::move(done);
    delete this;  // NOLINT: owned by the ops' callbacks, the last of which frees it
    d();
  }

  static void OnDone(void* arg) {
    auto* inv = static_cast<Invocation*>(arg);
    if (inv->remaining.fetch_sub(1) != 1) return;
    // Off the client's completion thread: `done` may run the graph's next kernels inline.
    auto* pool = inv->ctx->device()->tensorflow_cpu_worker_threads()->workers;
    pool->Schedule([inv] { inv->Complete(); });
  }
};

class KorovodKernel : public AsyncOpKernel {
 public:
  explicit KorovodKernel(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (c->HasAttr("tensor_name")) OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    bool use_node_name = false;
    bool ignore_name_scope = false;
    if (c->HasAttr("use_node_name")) OP_REQUIRES_OK(c, c->GetAttr("use_node_name", &use_node_name));
    if (c->HasAttr("ignore_name_scope")) {
      OP_REQUIRES_OK(c, c->GetAttr("ignore_name_scope", &ignore_name_scope));
    }
    if (use_node_name) {
      tensor_name_ = name();
      const size_t slash = tensor_name_.rfind('/');
      if (ignore_name_scope && slash != std::string::npos) tensor_name_.erase(0, slash + 1);
    }
    if (c->HasAttr("process_set_id")) {
      OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_));
    }
  }

 protected:
  KorovodOpSpec Spec(int kind) const {
    KorovodOpSpec s{};
    s.kind = kind;
    s.name = tensor_name_.empty() ? nullptr : tensor_name_.c_str();
    s.dtype = -1;
    s.prescale = 1.0;
    s.postscale = 1.0;
    s.process_set = process_set_;
    return s;
  }
  std::string What(const char* kind) const {
    return std::string("korovod ") + kind + " " +
           (tensor_name_.empty() ? name() : "'" + tensor_name_ + "'");
  }

  // Submits `spec` (or, with n > 1, a grouped allreduce of specs[0..n)) and arranges for
  // finish and done (at once, with the error, when nothing could be submitted).
  void Submit(OpKernelContext* ctx, DoneCallback done, const char* kind, const KorovodOpSpec* specs,
              int n, std::vector<Tensor> keep, Finish finish) {
    auto lease = ClientSession::Get().Acquire();
    const KorovodClientApi* api = lease.api();
    if (api == nullptr) {
      ctx->SetStatus(absl::FailedPreconditionError(
          absl::StrCat(What(kind), ": korovod has not been initialized; use hvd.init().")));
      done();
      return;
    }
    auto inv = std::make_unique<Invocation>();
    inv->ctx = ctx;
    inv->api = api;
    inv->what = What(kind);
    inv->finish = std::move(finish);
    inv->keep = std::move(keep);
    char err[1024] = {0};
    if (n == 1) {
      int code = 0;
      KorovodOp* op = api->submit(lease.client(), specs, &code, err, sizeof(err));
      if (op == nullptr) {
        ctx->SetStatus(StatusOf(code, inv->what, err));
        done();
        return;
      }
      inv->ops.push_back(op);
    } else {
      inv->ops.assign(n, nullptr);
      const int code = api->submit_grouped_allreduce(lease.client(), specs, n, inv->ops.data(), err,
                                                     sizeof(err));
      if (code != 0) {
        inv->ops.clear();
        ctx->SetStatus(StatusOf(code, inv->what, err));
        done();
        return;
      }
    }
    inv->done = std::move(done);
    inv->remaining.store(static_cast<int>(inv->ops.size()));
    Invocation* raw = inv.release();               // freed by the last completion
    const std::vector<KorovodOp*> ops = raw->ops;  // raw may be gone once a callback ran
    for (KorovodOp* op : ops) api->on_done(op, &Invocation::OnDone, raw);
  }

  std::string tensor_name_;
  int64_t process_set_ = 0;
};

// An output allocated now from the completed op: its shape and bytes.
absl::Status OutputFromOp(OpKernelContext* ctx, int index, const KorovodClientApi* api,
                          KorovodOp* op) {
  TensorShape shape;
  const int nd = api->ndims(op);
  const int64_t* dims = api->dims(op);
  for (int i = 0; i < nd; ++i) TF_RETURN_IF_ERROR(shape.AddDimWithStatus(dims[i]));
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, shape, &out));
  uint64_t bytes = 0;
  const void* data = api->output(op, &bytes);
  const uint64_t want = out->TotalBytes();
  if (bytes < want) {
    return absl::InternalError(
        absl::StrCat("korovod: output of ", bytes, " bytes for a tensor of ", want));
  }
  if (want > 0) std::memcpy(out->data(), data, want);
  return absl::OkStatus();
}

class AllreduceKernel : public KorovodKernel {
 public:
  explicit AllreduceKernel(OpKernelConstruction* c) : KorovodKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    const auto dims = Dims(in.shape());
    KorovodOpSpec s = Spec(KOROVOD_ALLREDUCE);
    s.dtype = KorovodDtype(in.dtype());
    s.ndims = static_cast<int>(dims.size());
    s.dims = dims.data();
    s.input = in.data();
    s.output = out->data();
    s.reduce_op = reduce_op_;
    s.prescale = prescale_;
    s.postscale = postscale_;
    Submit(ctx, std::move(done), "allreduce", &s, 1, {in, *out}, nullptr);
  }

 private:
  int64_t reduce_op_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class GroupedAllreduceKernel : public KorovodKernel {
 public:
  explicit GroupedAllreduceKernel(OpKernelConstruction* c) : KorovodKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    std::vector<KorovodOpSpec> specs(n);
    std::vector<std::vector<int64_t>> dims(n);
    std::vector<Tensor> keep;
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      Tensor* out = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(i, in.shape(), &out), done);
      dims[i] = Dims(in.shape());
      specs[i] = Spec(KOROVOD_ALLREDUCE);  // the group's name: members are <name>.<i>
      specs[i].dtype = KorovodDtype(in.dtype());
      specs[i].ndims = static_cast<int>(dims[i].size());
      specs[i].dims = dims[i].data();
      specs[i].input = in.data();
      specs[i].output = out->data();
      specs[i].reduce_op = static_cast<int>(reduce_op_);
      specs[i].prescale = prescale_;
      specs[i].postscale = postscale_;
      keep.push_back(in);
      keep.push_back(*out);
    }
    Submit(ctx, std::move(done), "grouped_allreduce", specs.data(), n, std::move(keep), nullptr);
  }

 private:
  int64_t reduce_op_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class AllgatherKernel : public KorovodKernel {
 public:
  using KorovodKernel::KorovodKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError(absl::StrCat(
                          What("allgather"), ": a tensor of rank 0 cannot be gathered")),
                      done);
    const auto dims = Dims(in.shape());
    KorovodOpSpec s = Spec(KOROVOD_ALLGATHER);
    s.dtype = KorovodDtype(in.dtype());
    s.ndims = static_cast<int>(dims.size());
    s.dims = dims.data();
    s.input = in.data();
    Submit(ctx, std::move(done), "allgather", &s, 1, {in},
           [](OpKernelContext* c, const KorovodClientApi* api, KorovodOp* op) {
             return OutputFromOp(c, 0, api, op);
           });
  }
};

class BroadcastKernel : public KorovodKernel {
 public:
  explicit BroadcastKernel(OpKernelConstruction* c) : KorovodKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    // In place on the output: the root sends it, the others receive into it.
    if (in.TotalBytes() > 0) std::memcpy(out->data(), in.data(), in.TotalBytes());
    const auto dims = Dims(in.shape());
    KorovodOpSpec s = Spec(KOROVOD_BROADCAST);
    s.dtype = KorovodDtype(in.dtype());
    s.ndims = static_cast<int>(dims.size());
    s.dims = dims.data();
    s.output = out->data();
    s.root = static_cast<int>(root_);
    Submit(ctx, std::move(done), "broadcast", &s, 1, {*out}, nullptr);
  }

 private:
  int64_t root_ = 0;
};

class AlltoallKernel : public KorovodKernel {
 public:
  using KorovodKernel::KorovodKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const Tensor& splits_t = ctx->input(1);
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError(
                          absl::StrCat(What("alltoall"), ": a tensor of rank 0 cannot be split")),
                      done);
    OP_REQUIRES_ASYNC(
        ctx, splits_t.dims() == 1,
        absl::InvalidArgumentError(absl::StrCat(What("alltoall"), ": splits must be a vector")),
        done);
    auto splits = std::make_shared<std::vector<int64_t>>();
    const auto flat = splits_t.flat<int32_t>();
    for (int64_t i = 0; i < flat.size(); ++i) splits->push_back(flat(i));
    const auto dims = Dims(in.shape());
    KorovodOpSpec s = Spec(KOROVOD_ALLTOALL);
    s.dtype = KorovodDtype(in.dtype());
    s.ndims = static_cast<int>(dims.size());
    s.dims = dims.data();
    s.input = in.data();
    s.splits = splits->empty() ? nullptr : splits->data();
    s.num_splits = static_cast<int>(splits->size());
    Submit(ctx, std::move(done), "alltoall", &s, 1, {in},
           [](OpKernelContext* c, const KorovodClientApi* api, KorovodOp* op) {
             TF_RETURN_IF_ERROR(OutputFromOp(c, 0, api, op));
             int n = 0;
             const int64_t* recv = api->received_splits(op, &n);
             Tensor* out = nullptr;
             TF_RETURN_IF_ERROR(c->allocate_output(1, TensorShape({n}), &out));
             auto v = out->flat<int32_t>();
             for (int i = 0; i < n; ++i) v(i) = static_cast<int32_t>(recv[i]);
             return absl::OkStatus();
           });
  }
};

class ReducescatterKernel : public KorovodKernel {
 public:
  explicit ReducescatterKernel(OpKernelConstruction* c) : KorovodKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError(absl::StrCat(
                          What("reducescatter"), ": a tensor of rank 0 cannot be scattered")),
                      done);
    const auto dims = Dims(in.shape());
    KorovodOpSpec s = Spec(KOROVOD_REDUCESCATTER);
    s.dtype = KorovodDtype(in.dtype());
    s.ndims = static_cast<int>(dims.size());
    s.dims = dims.data();
    s.input = in.data();
    s.reduce_op = static_cast<int>(reduce_op_);
    s.prescale = prescale_;
    s.postscale = postscale_;
    Submit(ctx, std::move(done), "reducescatter", &s, 1, {in},
           [](OpKernelContext* c, const KorovodClientApi* api, KorovodOp* op) {
             return OutputFromOp(c, 0, api, op);
           });
  }

 private:
  int64_t reduce_op_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

class BarrierKernel : public KorovodKernel {
 public:
  using KorovodKernel::KorovodKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    KorovodOpSpec s = Spec(KOROVOD_BARRIER);
    Submit(ctx, std::move(done), "barrier", &s, 1, {}, nullptr);
  }
};

class JoinKernel : public KorovodKernel {
 public:
  using KorovodKernel::KorovodKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    KorovodOpSpec s = Spec(KOROVOD_JOIN);
    Submit(ctx, std::move(done), "join", &s, 1, {},
           [](OpKernelContext* c, const KorovodClientApi* api, KorovodOp* op) {
             Tensor* out = nullptr;
             TF_RETURN_IF_ERROR(c->allocate_output(0, TensorShape({}), &out));
             out->scalar<int32_t>()() = api->last_joined_rank(op);
             return absl::OkStatus();
           });
  }
};

template <bool kRank>
class SessionValueKernel : public ::tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    auto lease = ClientSession::Get().Acquire();
    OP_REQUIRES(ctx, lease.api() != nullptr,
                absl::FailedPreconditionError(
                    absl::StrCat("korovod has not been initialized; use hvd.init().")));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() =
        kRank ? lease.api()->rank(lease.client()) : lease.api()->size(lease.client());
  }
};

using ::tensorflow::DEVICE_CPU;
REGISTER_KERNEL_BUILDER(Name("KorovodAllreduce").Device(DEVICE_CPU), AllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodGroupedAllreduce").Device(DEVICE_CPU), GroupedAllreduceKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodAllgather").Device(DEVICE_CPU), AllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodBroadcast").Device(DEVICE_CPU), BroadcastKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodAlltoall").Device(DEVICE_CPU), AlltoallKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodReducescatter").Device(DEVICE_CPU), ReducescatterKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodBarrier").Device(DEVICE_CPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodJoin").Device(DEVICE_CPU), JoinKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodRank").Device(DEVICE_CPU), SessionValueKernel<true>);
REGISTER_KERNEL_BUILDER(Name("KorovodSize").Device(DEVICE_CPU), SessionValueKernel<false>);

}  // namespace
}  // namespace korovod::tf
