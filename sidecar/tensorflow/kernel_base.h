// What every korovod TensorFlow kernel shares, CPU (collective_kernels.cc) and GPU
// (gpu_kernels.cc): the naming attributes, korovod's dtype of a TensorFlow type, Horovod's error
// types for korovod's status codes, and the asynchronous submission of host ops to the session.
#pragma once

#include <atomic>
#include <functional>
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

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// korovod's DataType values (common/data_type.h), which this library does not include.
inline int KorovodDtype(DataType t) {
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

inline constexpr int kInvalidArgument = 1;
inline constexpr int kFailedPrecondition = 6;

// Horovod's TensorFlow error types: a request this rank's sidecar refuses (bad splits, an
// unknown process set) is InvalidArgument; an op the ranks disagree on (shape, dtype, operation,
// a joined rank) FailedPrecondition; a lost peer, a closed session or a deadline UnknownError
// (hvd.elastic turns it into HorovodInternalError).
inline absl::Status StatusOf(int code, const std::string& what, const char* msg) {
  if (code == kInvalidArgument) return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
  if (code == kFailedPrecondition) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", msg));
  }
  return absl::UnknownError(absl::StrCat(what, ": ", msg));
}

inline std::vector<int64_t> Dims(const TensorShape& s) {
  std::vector<int64_t> d(s.dims());
  for (int i = 0; i < s.dims(); ++i) d[i] = s.dim_size(i);
  return d;
}

// Alltoall's splits input (an int32 vector, in host memory) as the C table takes them.
inline absl::Status ReadSplits(const Tensor& t, const std::string& what,
                               std::vector<int64_t>* splits) {
  if (t.dims() != 1) return absl::InvalidArgumentError(what + ": splits must be a vector");
  const auto flat = t.flat<int32_t>();
  splits->assign(flat.data(), flat.data() + flat.size());
  return absl::OkStatus();
}

// Alltoall's second output: the rows received from each rank.
inline absl::Status OutputReceivedSplits(OpKernelContext* ctx, const int64_t* recv, int64_t n) {
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({n}), &out));
  auto v = out->flat<int32_t>();
  for (int64_t i = 0; i < n; ++i) v(i) = static_cast<int32_t>(recv[i]);
  return absl::OkStatus();
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

// The reduce op and scaling attributes of allreduce, grouped allreduce and reducescatter.
struct ReduceAttrs {
  int64_t reduce_op = 0;
  float prescale = 1.0f;
  float postscale = 1.0f;

  absl::Status Read(OpKernelConstruction* c) {
    TF_RETURN_IF_ERROR(c->GetAttr("reduce_op", &reduce_op));
    TF_RETURN_IF_ERROR(c->GetAttr("prescale_factor", &prescale));
    return c->GetAttr("postscale_factor", &postscale);
  }
  void Apply(KorovodOpSpec* s) const {
    s->reduce_op = static_cast<int>(reduce_op);
    s->prescale = prescale;
    s->postscale = postscale;
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
  // `s` on tensor `t`: its dtype and dimensions (`dims` holds them while `s` is used).
  static KorovodOpSpec WithDims(KorovodOpSpec s, const Tensor& t, std::vector<int64_t>* dims) {
    *dims = Dims(t.shape());
    s.dtype = KorovodDtype(t.dtype());
    s.ndims = static_cast<int>(dims->size());
    s.dims = dims->data();
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

}  // namespace korovod::tf
