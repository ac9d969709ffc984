// The CPU kernels of the korovod TensorFlow ops. Each is asynchronous: ComputeAsync submits to
// the sidecar client (the session korovod.tensorflow handed over) and returns; the client's
// completion callback hands the rest (outputs of a size known only now, then `done`) to the
// device's worker pool, so no thread waits per op and the graph runs the next ops meanwhile.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sidecar/tensorflow/kernel_base.h"

namespace korovod::tf {
namespace {

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
    OP_REQUIRES_OK(c, reduce_.Read(c));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, in.shape(), &out), done);
    std::vector<int64_t> dims;
    KorovodOpSpec s = WithDims(Spec(KOROVOD_ALLREDUCE), in, &dims);
    s.input = in.data();
    s.output = out->data();
    reduce_.Apply(&s);
    Submit(ctx, std::move(done), "allreduce", &s, 1, {in, *out}, nullptr);
  }

 private:
  ReduceAttrs reduce_;
};

class GroupedAllreduceKernel : public KorovodKernel {
 public:
  explicit GroupedAllreduceKernel(OpKernelConstruction* c) : KorovodKernel(c) {
    OP_REQUIRES_OK(c, reduce_.Read(c));
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
      // The group's name: members are <name>.<i>.
      specs[i] = WithDims(Spec(KOROVOD_ALLREDUCE), in, &dims[i]);
      specs[i].input = in.data();
      specs[i].output = out->data();
      reduce_.Apply(&specs[i]);
      keep.push_back(in);
      keep.push_back(*out);
    }
    Submit(ctx, std::move(done), "grouped_allreduce", specs.data(), n, std::move(keep), nullptr);
  }

 private:
  ReduceAttrs reduce_;
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
    std::vector<int64_t> dims;
    KorovodOpSpec s = WithDims(Spec(KOROVOD_ALLGATHER), in, &dims);
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
    std::vector<int64_t> dims;
    KorovodOpSpec s = WithDims(Spec(KOROVOD_BROADCAST), in, &dims);
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
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError(
                          absl::StrCat(What("alltoall"), ": a tensor of rank 0 cannot be split")),
                      done);
    std::vector<int64_t> splits;
    OP_REQUIRES_OK_ASYNC(ctx, ReadSplits(ctx->input(1), What("alltoall"), &splits), done);
    std::vector<int64_t> dims;
    KorovodOpSpec s = WithDims(Spec(KOROVOD_ALLTOALL), in, &dims);
    s.input = in.data();
    s.splits = splits.empty() ? nullptr : splits.data();
    s.num_splits = static_cast<int>(splits.size());
    Submit(ctx, std::move(done), "alltoall", &s, 1, {in},
           [](OpKernelContext* c, const KorovodClientApi* api, KorovodOp* op) {
             TF_RETURN_IF_ERROR(OutputFromOp(c, 0, api, op));
             int n = 0;
             const int64_t* recv = api->received_splits(op, &n);
             return OutputReceivedSplits(c, recv, n);
           });
  }
};

class ReducescatterKernel : public KorovodKernel {
 public:
  explicit ReducescatterKernel(OpKernelConstruction* c) : KorovodKernel(c) {
    OP_REQUIRES_OK(c, reduce_.Read(c));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    OP_REQUIRES_ASYNC(ctx, in.dims() >= 1,
                      absl::InvalidArgumentError(absl::StrCat(
                          What("reducescatter"), ": a tensor of rank 0 cannot be scattered")),
                      done);
    std::vector<int64_t> dims;
    KorovodOpSpec s = WithDims(Spec(KOROVOD_REDUCESCATTER), in, &dims);
    s.input = in.data();
    reduce_.Apply(&s);
    Submit(ctx, std::move(done), "reducescatter", &s, 1, {in},
           [](OpKernelContext* c, const KorovodClientApi* api, KorovodOp* op) {
             return OutputFromOp(c, 0, api, op);
           });
  }

 private:
  ReduceAttrs reduce_;
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

// On a GPU too, with their outputs in host memory (they carry no tensor), so that they stand in a
// GPU device scope beside the GPU collectives (gpu_kernels.cc) without a copy.
using ::tensorflow::DEVICE_GPU;
REGISTER_KERNEL_BUILDER(Name("KorovodBarrier").Device(DEVICE_GPU), BarrierKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodJoin").Device(DEVICE_GPU).HostMemory("last_joined_rank"),
                        JoinKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodRank").Device(DEVICE_GPU).HostMemory("rank"),
                        SessionValueKernel<true>);
REGISTER_KERNEL_BUILDER(Name("KorovodSize").Device(DEVICE_GPU).HostMemory("size"),
                        SessionValueKernel<false>);

}  // namespace
}  // namespace korovod::tf
