// The device ops of korovod's TensorFlow GPU kernels (sidecar/tensorflow/device_op.h), on
// machines without a GPU: DeviceOp runs exactly as in the kernels, through the client's C table
// to real sidecars with KOROVOD_DEVICE_BACKEND=host, with the trainer's "GPU" in host memory
// (HostDeviceApi: allocations opened by handle, ordered stream threads, interprocess events). The
// framework's side is played as TensorFlow plays it: outputs handed out of one large allocation
// (as the BFC allocator does), work queued on the stream, completions on a worker thread.
//
// What a user would see: every op's result where the tensors lie (uneven allgather, alltoall and
// reducescatter outputs sized from the host prelude or the set position), empty tensors,
// the ready event ordering both the input's producer and the output memory's last user before
// the collective, Horovod's error codes (mismatch: FailedPrecondition; bad splits, memory that
// is not a device allocation: InvalidArgument; no session), each event destroyed and `done`
// called once, off the client's thread. And the CUDA driver loader's error without a driver.
#include "sidecar/tensorflow/device_op.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "common/shared_memory.h"
#include "runtime/device/host_device_api.h"
#include "sidecar/client/c_api.h"
#include "sidecar/client/client.h"
#include "sidecar/tensorflow/client_session.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"
#ifdef KOROVOD_TEST_CUDA_DRIVER_GPU
#include "sidecar/tensorflow/cuda_driver_gpu.h"
#endif

namespace korovod::sidecar::daemon_test {
namespace {

using namespace std::chrono_literals;
using tf::DeviceOpCalls;
using tf::DeviceOpRequest;
using tf::DeviceOpResult;

const std::vector<std::string> kHostDevices = {"KOROVOD_DEVICE_BACKEND=host"};
constexpr int kFloat32 = static_cast<int>(DataType::kFloat32);
constexpr int kFailedPrecondition = 6;

std::string TrainerPrefix() { return "/kvtfdev-" + std::to_string(::getppid()) + "-"; }

void SweepTrainerAllocations() {
  const std::string mine = "/kvtfdev-" + std::to_string(::getpid()) + "-";
  for (const std::string& name : ListShmNames(mine)) ::shm_unlink(name.c_str());
}

// The trainer's GPU in host memory: one device per rank, a pool allocation that outputs are cut
// from (a caching allocator's region), a stream, and TrainerGpu over them.
class HostTrainerGpu final : public tf::TrainerGpu {
 public:
  explicit HostTrainerGpu(int device) : api(8, TrainerPrefix()), device_(device) {
    pool_ = static_cast<std::byte*>(Allocate(kPoolBytes));
    stream = Must(api.CreateStream(device));
  }
  ~HostTrainerGpu() override { api.DestroyStream(stream); }

  void* Allocate(size_t bytes) {
    void* p = Must(api.Malloc(device_, bytes));
    allocations_[static_cast<std::byte*>(p)] = bytes;
    return p;
  }
  // The next block of the pool, 256-byte aligned, as TensorFlow's allocator hands them out.
  float* Take(uint64_t bytes) {
    float* p = reinterpret_cast<float*>(pool_ + used_);
    used_ += (bytes + 255) / 256 * 256;
    TCHECK(used_ <= kPoolBytes);
    return p;
  }

  // Hands `block` out again next (the allocator reusing memory whose last user is still queued).
  void Rewind(float* block) {
    used_ = static_cast<uint64_t>(reinterpret_cast<std::byte*>(block) - pool_);
  }

  std::string Export(const void* data, unsigned char uuid[16],
                     KorovodDeviceBuffer* buffer) override {
    const auto* p = static_cast<const std::byte*>(data);
    for (const auto& [base, size] : allocations_) {
      if (p < base || p >= base + size) continue;
      auto handle = api.ExportMemHandle(base);
      if (!handle.ok()) return handle.status().ToString();
      const DeviceUuid id = Must(api.UuidOf(device_));
      std::memcpy(uuid, id.data(), 16);
      std::memcpy(buffer->mem_handle, handle->data(), 64);
      buffer->allocation_base = reinterpret_cast<uint64_t>(base);
      buffer->allocation_bytes = size;
      buffer->offset = static_cast<uint64_t>(p - base);
      ++exports;
      return {};
    }
    return "memory at " + std::to_string(reinterpret_cast<uint64_t>(data)) +
           " is not in a device allocation";
  }
  std::string CopyAsync(void* dst, const void* src, uint64_t bytes, void* s) override {
    const Status st = api.CopyAsync(dst, src, bytes, s);
    return st.ok() ? std::string() : st.ToString();
  }
  std::string RecordEvent(const void*, void* s, unsigned char handle[64], void** event) override {
    auto h = api.RecordIpcEvent(device_, s, event);
    if (!h.ok()) return h.status().ToString();
    std::memcpy(handle, h->data(), 64);
    ++live_events;
    return {};
  }
  void DestroyEvent(const void*, void* event) override {
    api.DestroyEvent(event);
    --live_events;
  }

  HostDeviceApi api;
  DeviceStream stream = nullptr;
  std::atomic<int> live_events{0};
  std::atomic<int> exports{0};

 private:
  static constexpr uint64_t kPoolBytes = 1 << 20;
  int device_;
  std::map<std::byte*, size_t> allocations_;
  std::byte* pool_ = nullptr;
  uint64_t used_ = 0;
};

// The framework's worker pool: one thread, joined at the end.
class Worker {
 public:
  Worker() : thread_([this] { Loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Schedule(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_all();
  }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// One op run as a kernel runs it; Wait() gives its result and output.
struct KernelRun {
  HostTrainerGpu& gpu;
  Worker& worker;
  std::mutex mu;
  std::condition_variable cv;
  int done_calls = 0;
  bool done_on_worker = false;
  DeviceOpResult result;
  std::vector<int64_t> out_dims;
  float* output = nullptr;

  KernelRun(HostTrainerGpu& g, Worker& w) : gpu(g), worker(w) {}

  void Start(KorovodOpSpec spec, const std::vector<int64_t>& dims, const float* input) {
    spec.dims = dims.data();
    spec.ndims = static_cast<int>(dims.size());
    DeviceOpRequest req{};
    req.spec = spec;
    req.input = input;
    req.input_bytes =
        sizeof(float) * std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
    req.stream = gpu.stream;
    DeviceOpCalls calls;
    calls.allocate_output = [this](const std::vector<int64_t>& d, std::string*) -> void* {
      out_dims = d;
      const uint64_t n = std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>());
      output = n == 0 ? nullptr : gpu.Take(n * sizeof(float));
      return output;
    };
    calls.allocate_scratch = [this](uint64_t bytes, std::string*) -> void* {
      return gpu.Take(bytes);
    };
    calls.schedule = [this](std::function<void()> w) { worker.Schedule(std::move(w)); };
    calls.done = [this](DeviceOpResult r) {
      std::lock_guard<std::mutex> lock(mu);
      ++done_calls;
      done_on_worker = std::this_thread::get_id() == worker.id();
      result = std::move(r);
      cv.notify_all();
    };
    tf::RunDeviceOp(&gpu, req, std::move(calls));
  }
  const DeviceOpResult& Wait() {
    std::unique_lock<std::mutex> lock(mu);
    TCHECK(cv.wait_for(lock, 30s, [&] { return done_calls > 0; }));
    return result;
  }
};

KorovodOpSpec Spec(int kind, const char* name) {
  KorovodOpSpec s{};
  s.kind = kind;
  s.name = name;
  s.dtype = kFloat32;
  s.prescale = 1.0;
  s.postscale = 1.0;
  return s;
}

// A session for DeviceOp, as korovod.tensorflow hands it over after hvd.init().
struct Session {
  explicit Session(const std::string& socket) : client(Must(Client::Connect(socket, 10s))) {
    TCHECK(tf::ClientSession::Get().Set(korovod_client_api(), client.get()) == 0);
  }
  ~Session() { tf::ClientSession::Get().Set(nullptr, nullptr); }
  std::unique_ptr<Client> client;
};

TEST(TensorFlowDeviceOp, EveryOpLeavesItsResultInDeviceMemory) {
  constexpr int kRanks = 3;
  Job job(kRanks, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    Session session(job.socket(r));
    HostTrainerGpu gpu(r);
    Worker worker;
    const int row = 4;  // floats per row

    // Allreduce: 1000 floats from the pool, summed in place of a fresh output.
    float* in = gpu.Take(1000 * sizeof(float));
    for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(r + 1) * i;
    KernelRun sum(gpu, worker);
    sum.Start(Spec(KOROVOD_ALLREDUCE, "grad.0"), {1000}, in);
    TCHECK(sum.Wait().code == 0);
    TCHECK(sum.output != nullptr && sum.output != in);
    for (int i = 0; i < 1000; ++i) TCHECK(sum.output[i] == 6.0f * i);
    TCHECK(sum.done_calls == 1 && sum.done_on_worker);

    // Broadcast from set rank 1 into the output (a copy of the input on the stream first).
    float* b = gpu.Take(10 * sizeof(float));
    for (int i = 0; i < 10; ++i) b[i] = static_cast<float>(100 * r + i);
    KernelRun bc(gpu, worker);
    KorovodOpSpec bs = Spec(KOROVOD_BROADCAST, "weights");
    bs.root = 1;
    bc.Start(bs, {10}, b);
    TCHECK(bc.Wait().code == 0);
    for (int i = 0; i < 10; ++i) TCHECK(bc.output[i] == 100.0f + i);
    for (int i = 0; i < 10; ++i) TCHECK(b[i] == static_cast<float>(100 * r + i));  // input kept

    // Allgather of uneven first dimensions (rank 1 has none): the host prelude sizes the output.
    const int rows = r == 1 ? 0 : r + 1;
    float* g = rows == 0 ? nullptr : gpu.Take(rows * row * sizeof(float));
    for (int i = 0; i < rows * row; ++i) g[i] = static_cast<float>(10 * r + i);
    KernelRun ag(gpu, worker);
    ag.Start(Spec(KOROVOD_ALLGATHER, "embeddings"), {rows, row}, g);
    TCHECK(ag.Wait().code == 0);
    TCHECK(ag.out_dims == (std::vector<int64_t>{1 + 3, row}));
    const float want_ag[] = {0, 1, 2, 3, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    for (int i = 0; i < 16; ++i) TCHECK(ag.output[i] == want_ag[i]);

    // Alltoall with splits: rank r sends j+1 rows to rank j; rows past the splits stay behind.
    const std::vector<int64_t> splits = {1, 2, 3};
    float* a = gpu.Take(7 * row * sizeof(float));
    for (int i = 0; i < 7 * row; ++i) a[i] = static_cast<float>(1000 * r + i / row);
    KernelRun at(gpu, worker);
    KorovodOpSpec as = Spec(KOROVOD_ALLTOALL, "tokens");
    as.splits = splits.data();
    as.num_splits = 3;
    at.Start(as, {7, row}, a);
    TCHECK(at.Wait().code == 0);
    TCHECK(at.out_dims == (std::vector<int64_t>{3 * (r + 1), row}));
    TCHECK(at.result.received_splits == (std::vector<int64_t>(3, r + 1)));
    // From rank j: its rows starting at sum(splits[<r]) = r(r+1)/2.
    for (int j = 0, o = 0; j < 3; ++j) {
      for (int k = 0; k < r + 1; ++k, ++o) {
        TCHECK(at.output[o * row] == static_cast<float>(1000 * j + r * (r + 1) / 2 + k));
      }
    }

    // Reducescatter of 5 rows on 3 ranks: 2, 2, 1 rows, this rank's block of the sum.
    float* s = gpu.Take(5 * row * sizeof(float));
    for (int i = 0; i < 5 * row; ++i) s[i] = static_cast<float>(i);
    KernelRun rs(gpu, worker);
    rs.Start(Spec(KOROVOD_REDUCESCATTER, "shard"), {5, row}, s);
    TCHECK(rs.Wait().code == 0);
    TCHECK(rs.out_dims == (std::vector<int64_t>{r < 2 ? 2 : 1, row}));
    for (int i = 0; i < rs.out_dims[0] * row; ++i) TCHECK(rs.output[i] == 3.0f * (2 * r * row + i));

    // Every op's ready event is gone once it completed; nothing went through the arena.
    TCHECK(gpu.live_events == 0);
    TCHECK(session.client->copy_stats().staged_in_bytes < 1024);  // the preludes' few bytes
  }));
  SweepTrainerAllocations();
}

TEST(TensorFlowDeviceOp, TheEventOrdersTheInputsProducerAndTheOutputsLastUser) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    Session session(job.socket(r));
    HostTrainerGpu gpu(r);
    Worker worker;
    float* in = gpu.Take(1000 * sizeof(float));
    float* reused = gpu.Take(1000 * sizeof(float));  // the next block the "allocator" hands out
    for (int i = 0; i < 1000; ++i) in[i] = -1.0f;    // stale: never what is reduced
    // Queued before the op: the kernel producing the gradient, and a kernel still writing the
    // memory the allocator will hand out as the output (stream order made it free to reuse).
    TOK(gpu.api.Enqueue(gpu.stream, [in, reused, r] {
      std::this_thread::sleep_for(300ms);
      for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(r + 1);
      for (int i = 0; i < 1000; ++i) reused[i] = 99.0f;
    }));
    // The output is allocated where `reused` is: the allocator handed that memory out again.
    gpu.Rewind(reused);
    KernelRun run(gpu, worker);
    run.Start(Spec(KOROVOD_ALLREDUCE, "late.grad"), {1000}, in);
    TCHECK(run.Wait().code == 0);
    TCHECK(run.output == reused);
    for (int i = 0; i < 1000; ++i) TCHECK(run.output[i] == 3.0f);  // not 99: written after
  }));
  SweepTrainerAllocations();
}

TEST(TensorFlowDeviceOp, ErrorsCarryHorovodsCodesAndTheSidecarKeepsServing) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    HostTrainerGpu gpu(r);
    Worker worker;
    float* in = gpu.Take(64 * sizeof(float));

    // No session: FailedPrecondition at once, on the caller's thread.
    {
      KernelRun run(gpu, worker);
      run.Start(Spec(KOROVOD_ALLREDUCE, "early"), {16}, in);
      TCHECK(run.Wait().code == kFailedPrecondition);
      TCONTAINS(run.result.message, "hvd.init()");
    }
    Session session(job.socket(r));
    // Shapes the ranks disagree on: FailedPrecondition naming the tensor, on both ranks.
    {
      KernelRun run(gpu, worker);
      run.Start(Spec(KOROVOD_ALLREDUCE, "mismatch"), {r == 0 ? 16 : 8}, in);
      TCHECK(run.Wait().code == kFailedPrecondition);
      TCONTAINS(run.result.message, "mismatch");
    }
    // Bad splits: InvalidArgument before anything is submitted.
    {
      const std::vector<int64_t> splits = {1};
      KernelRun run(gpu, worker);
      KorovodOpSpec s = Spec(KOROVOD_ALLTOALL, "bad.splits");
      s.splits = splits.data();
      s.num_splits = 1;
      run.Start(s, {4, 2}, in);
      TCHECK(run.Wait().code == KOROVOD_INVALID_ARGUMENT);
      TCONTAINS(run.result.message, "Number of entries in splits");
    }
    // Host memory where device memory belongs: InvalidArgument naming it.
    {
      std::vector<float> host(16, 1.0f);
      KernelRun run(gpu, worker);
      run.Start(Spec(KOROVOD_ALLREDUCE, "host.memory"), {16}, host.data());
      TCHECK(run.Wait().code == KOROVOD_INVALID_ARGUMENT);
      TCONTAINS(run.result.message, "not in a device allocation");
    }
    // An op of an unregistered process set: refused with the set named.
    {
      KernelRun run(gpu, worker);
      KorovodOpSpec s = Spec(KOROVOD_REDUCESCATTER, "no.set");
      s.process_set = 7;
      run.Start(s, {4}, in);
      TCHECK(run.Wait().code == KOROVOD_INVALID_ARGUMENT);
      TCONTAINS(run.result.message, "process set 7");
    }
    // Still serving: the next op completes.
    for (int i = 0; i < 16; ++i) in[i] = 1.0f;
    KernelRun ok(gpu, worker);
    ok.Start(Spec(KOROVOD_ALLREDUCE, "after"), {16}, in);
    TCHECK(ok.Wait().code == 0);
    TCHECK(ok.output[15] == 2.0f);
    TCHECK(gpu.live_events == 0);
  }));
  SweepTrainerAllocations();
}

TEST(TensorFlowDeviceOp, ASidecarWithoutADeviceBackendRefusesDeviceTensors) {
  Job job(2, {"KOROVOD_DEVICE_BACKEND=none"});
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    Session session(job.socket(r));
    TCHECK(std::string(korovod_client_api()->device_backend(session.client.get())) == "none");
    HostTrainerGpu gpu(r);
    Worker worker;
    KernelRun run(gpu, worker);
    run.Start(Spec(KOROVOD_ALLREDUCE, "g"), {16}, gpu.Take(64));
    TCHECK(run.Wait().code != 0);
    TCONTAINS(run.result.message, "KOROVOD_DEVICE_BACKEND");
    TCHECK(gpu.live_events == 0);
  }));
  SweepTrainerAllocations();
}

#ifdef KOROVOD_TEST_CUDA_DRIVER_GPU
// Without a driver the loader names what is missing; with one, memory that is not the GPU's is
// refused with the driver's error. Either way no exception and no crash.
TEST(TensorFlowDeviceOp, TheCudaDriverLoaderNamesWhatIsMissing) {
  std::string err;
  tf::TrainerGpu* gpu = tf::CudaDriverGpu::Get(&err);
  if (gpu == nullptr) {
    EXPECT_NE(err.find("libcuda.so.1"), std::string::npos) << err;
    std::string again;
    EXPECT_EQ(tf::CudaDriverGpu::Get(&again), nullptr);
    EXPECT_EQ(again, err);
    return;
  }
  std::vector<float> host(16);
  unsigned char uuid[16];
  KorovodDeviceBuffer buffer{};
  const std::string e = gpu->Export(host.data(), uuid, &buffer);
  EXPECT_NE(e.find("cuPointerGetAttribute"), std::string::npos) << e;
}
#endif

}  // namespace
}  // namespace korovod::sidecar::daemon_test
