// The GPU kernels of the korovod TensorFlow ops: the tensors stay in GPU memory. Each kernel
// hands its tensors to DeviceOp (device_op.h: IPC handles of TensorFlow's allocations, an event
// recorded on TensorFlow's compute stream, the sidecar's NCCL) and returns; DeviceOp calls back
// on the device's worker pool once the result is in device memory. The driver calls go through
// CudaDriverGpu (libcuda.so.1 loaded at the first GPU op), so this library links no CUDA library
// and loads on CPU-only TensorFlow, where these kernels are registered but never placed.
//
// korovod.tensorflow places the ops on the CPU instead when the sidecar has no device backend
// (KOROVOD_DEVICE_BACKEND other than nccl): TensorFlow then copies the tensors.
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sidecar/tensorflow/cuda_driver_gpu.h"
#include "sidecar/tensorflow/device_op.h"
#include "sidecar/tensorflow/kernel_base.h"
#include "xla/stream_executor/stream.h"

namespace korovod::tf {
namespace {

// What a device op's callbacks need from the kernel invocation.
struct GpuInvocation {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  std::string what;
  std::mutex mu;
  std::vector<Tensor> scratch;  // placeholders of empty tensors, until done
  std::atomic<int> remaining{0};
  absl::Status status;  // the first failure (under mu)
};

DeviceOpCalls CallsFor(const std::shared_ptr<GpuInvocation>& inv, int output_index,
                       std::function<absl::Status(const DeviceOpResult&)> finish) {
  DeviceOpCalls calls;
  calls.allocate_output = [inv, output_index](const std::vector<int64_t>& dims,
                                              std::string* err) -> void* {
    TensorShape shape;
    Tensor* out = nullptr;
    absl::Status s;
    for (int64_t d : dims) {
      s = shape.AddDimWithStatus(d);
      if (!s.ok()) break;
    }
    if (s.ok()) s = inv->ctx->allocate_output(output_index, shape, &out);
    if (!s.ok()) {
      *err = std::string(s.message());
      return nullptr;
    }
    return out->NumElements() == 0 ? nullptr : const_cast<char*>(out->tensor_data().data());
  };
  calls.allocate_scratch = [inv](uint64_t bytes, std::string* err) -> void* {
    Tensor t;
    const absl::Status s = inv->ctx->allocate_temp(::tensorflow::DT_INT8,
                                                   TensorShape({static_cast<int64_t>(bytes)}), &t);
    if (!s.ok()) {
      *err = std::string(s.message());
      return nullptr;
    }
    void* data = const_cast<char*>(t.tensor_data().data());
    std::lock_guard<std::mutex> lock(inv->mu);
    inv->scratch.push_back(std::move(t));
    return data;
  };
  calls.schedule = [inv](std::function<void()> work) {
    inv->ctx->device()->tensorflow_cpu_worker_threads()->workers->Schedule(std::move(work));
  };
  calls.done = [inv, finish = std::move(finish)](DeviceOpResult r) {
    absl::Status s =
        r.code == 0 ? absl::OkStatus() : StatusOf(r.code, inv->what, r.message.c_str());
    if (s.ok() && finish) s = finish(r);
    {
      std::lock_guard<std::mutex> lock(inv->mu);
      if (!s.ok() && inv->status.ok()) inv->status = s;
    }
    if (inv->remaining.fetch_sub(1) != 1) return;
    if (!inv->status.ok()) inv->ctx->SetStatus(inv->status);
    auto done = std::move(inv->done);
    done();
  };
  return calls;
}

class GpuKernel : public KorovodKernel {
 public:
  using KorovodKernel::KorovodKernel;

 protected:
  // Runs `specs` (each on inputs[i], its output at output index i; one op unless grouped) and
  // calls `done` after the last; `finish` fills what else the op outputs.
  void RunOnDevice(OpKernelContext* ctx, DoneCallback done, const char* kind,
                   std::vector<KorovodOpSpec> specs, std::vector<const Tensor*> inputs,
                   std::function<absl::Status(const DeviceOpResult&)> finish = nullptr) {
    std::string err;
    TrainerGpu* gpu = CudaDriverGpu::Get(&err);
    OP_REQUIRES_ASYNC(ctx, gpu != nullptr,
                      absl::FailedPreconditionError(absl::StrCat(What(kind), ": ", err)), done);
    auto* dc = ctx->op_device_context();
    void* stream = dc != nullptr && dc->stream() != nullptr
                       ? dc->stream()->platform_specific_handle().stream
                       : nullptr;
    OP_REQUIRES_ASYNC(ctx, stream != nullptr,
                      absl::InternalError(absl::StrCat(What(kind), ": no GPU stream")), done);
    auto inv = std::make_shared<GpuInvocation>();
    inv->ctx = ctx;
    inv->done = std::move(done);
    inv->what = What(kind);
    inv->remaining.store(static_cast<int>(specs.size()));
    for (size_t i = 0; i < specs.size(); ++i) {
      DeviceOpRequest req;
      req.spec = specs[i];
      req.input = inputs[i]->NumElements() == 0 ? nullptr : inputs[i]->tensor_data().data();
      req.input_bytes = inputs[i]->TotalBytes();
      req.stream = stream;
      RunDeviceOp(gpu, req, CallsFor(inv, static_cast<int>(i), finish));
    }
  }
};

// Allreduce and reducescatter: reduce op and scaling attributes.
template <int kKind>
class GpuReduceKernel : public GpuKernel {
 public:
  explicit GpuReduceKernel(OpKernelConstruction* c) : GpuKernel(c) {
    OP_REQUIRES_OK(c, reduce_.Read(c));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs();
    std::vector<std::vector<int64_t>> dims(n);
    std::vector<std::string> names(n);
    std::vector<KorovodOpSpec> specs(n);
    std::vector<const Tensor*> inputs(n);
    for (int i = 0; i < n; ++i) {
      inputs[i] = &ctx->input(i);
      specs[i] = WithDims(Spec(kKind), *inputs[i], &dims[i]);
      reduce_.Apply(&specs[i]);
      if (n > 1 && specs[i].name != nullptr) {  // a group's members, as the client names them
        names[i] = tensor_name_ + "." + std::to_string(i);
        specs[i].name = names[i].c_str();
      }
    }
    RunOnDevice(ctx, std::move(done), kKind == KOROVOD_ALLREDUCE ? "allreduce" : "reducescatter",
                std::move(specs), std::move(inputs));
  }

 private:
  ReduceAttrs reduce_;
};

class GpuAllgatherKernel : public GpuKernel {
 public:
  using GpuKernel::GpuKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::vector<int64_t> dims;
    const Tensor& in = ctx->input(0);
    RunOnDevice(ctx, std::move(done), "allgather", {WithDims(Spec(KOROVOD_ALLGATHER), in, &dims)},
                {&in});
  }
};

class GpuBroadcastKernel : public GpuKernel {
 public:
  explicit GpuBroadcastKernel(OpKernelConstruction* c) : GpuKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::vector<int64_t> dims;
    const Tensor& in = ctx->input(0);
    KorovodOpSpec s = WithDims(Spec(KOROVOD_BROADCAST), in, &dims);
    s.root = static_cast<int>(root_);
    RunOnDevice(ctx, std::move(done), "broadcast", {s}, {&in});
  }

 private:
  int64_t root_ = 0;
};

class GpuAlltoallKernel : public GpuKernel {
 public:
  using GpuKernel::GpuKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> splits;  // ctx->input(1) is in host memory
    OP_REQUIRES_OK_ASYNC(ctx, ReadSplits(ctx->input(1), What("alltoall"), &splits), done);
    std::vector<int64_t> dims;
    KorovodOpSpec s = WithDims(Spec(KOROVOD_ALLTOALL), in, &dims);
    s.splits = splits.empty() ? nullptr : splits.data();
    s.num_splits = static_cast<int>(splits.size());
    RunOnDevice(ctx, std::move(done), "alltoall", {s}, {&in}, [ctx](const DeviceOpResult& r) {
      return OutputReceivedSplits(ctx, r.received_splits.data(),
                                  static_cast<int64_t>(r.received_splits.size()));
    });
  }
};

using ::tensorflow::DEVICE_GPU;
REGISTER_KERNEL_BUILDER(Name("KorovodAllreduce").Device(DEVICE_GPU),
                        GpuReduceKernel<KOROVOD_ALLREDUCE>);
REGISTER_KERNEL_BUILDER(Name("KorovodGroupedAllreduce").Device(DEVICE_GPU),
                        GpuReduceKernel<KOROVOD_ALLREDUCE>);
REGISTER_KERNEL_BUILDER(Name("KorovodReducescatter").Device(DEVICE_GPU),
                        GpuReduceKernel<KOROVOD_REDUCESCATTER>);
REGISTER_KERNEL_BUILDER(Name("KorovodAllgather").Device(DEVICE_GPU), GpuAllgatherKernel);
REGISTER_KERNEL_BUILDER(Name("KorovodBroadcast").Device(DEVICE_GPU), GpuBroadcastKernel);
REGISTER_KERNEL_BUILDER(
    Name("KorovodAlltoall").Device(DEVICE_GPU).HostMemory("splits").HostMemory("received_splits"),
    GpuAlltoallKernel);

}  // namespace
}  // namespace korovod::tf

// Present when the GPU kernels are built: korovod.tensorflow looks for it.
extern "C" __attribute__((visibility("default"))) int korovod_tf_gpu_kernels(void) { return 1; }
