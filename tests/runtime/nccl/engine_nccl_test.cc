// The engine's device path on a GPU: engines whose DeviceBackend is the CUDA runtime and NCCL
// (CudaDeviceApi + NcclDeviceCollectives), and the CUDA IPC contract the sidecar relies on
// (another process maps a tensor's allocation by handle and waits on its interprocess event).
// Rank r drives device r, so the world has min(2, devices) ranks. Skipped without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "runtime/device/cuda_device_api.h"
#include "runtime/nccl/nccl_device_collectives.h"
#include "tests/runtime/core/engine_harness.h"

namespace korovod::testing {
namespace {

using namespace std::chrono_literals;

#define KV_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: needs a GPU to run"; \
  } while (0)

EngineWorldSpec Spec(CudaDeviceApi* api) {
  EngineWorldSpec s;
  s.size = std::min(2, CudaDeviceCount());
  s.config.stall_check = 0ms;
  s.device = [api](int) { return DeviceBackend{api, NcclDeviceCollectives::Factory()}; };
  return s;
}

std::vector<float> Download(const void* p, size_t n) {
  std::vector<float> h(n);
  (void)cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
  return h;
}

TEST(EngineOnNccl, FusedAndLoneDeviceAllreducesAndABroadcastAreExact) {
  KV_SKIP_WITHOUT_GPU();
  CudaDeviceApi api;
  auto reports = RunEngineRanks(Spec(&api), [&](EngineRank& c) -> Status {
    const int n = c.engine().size();
    constexpr int kTensors = 16;
    std::vector<void*> bufs;
    std::vector<OpRequest> reqs;
    for (int k = 0; k < kTensors; ++k) {
      const size_t count = 1000 + 333 * k;
      KV_ASSIGN_OR_RETURN(void* p, api.Malloc(c.rank(), count * sizeof(float)));
      std::vector<float> h(count, static_cast<float>((c.rank() + 1) * (k + 1)));
      if (cudaMemcpy(p, h.data(), count * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        return Internal("upload");
      bufs.push_back(p);
      OpRequest r;
      r.name = "grad." + std::to_string(k);
      r.shape = {static_cast<int64_t>(count)};
      r.input = r.output = p;
      r.op = ReduceOp::kAverage;
      r.device = c.rank();
      reqs.push_back(r);
    }
    KV_ASSIGN_OR_RETURN(auto handles, c.engine().SubmitGroup(std::move(reqs)));
    for (auto& h : handles) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    for (int k = 0; k < kTensors; ++k) {
      const float want = static_cast<float>((k + 1) * n * (n + 1) / 2) / n;
      const std::vector<float> got = Download(bufs[k], 1000 + 333 * k);
      c.Check(got.front() == want && got.back() == want, "grad." + std::to_string(k));
    }
    OpRequest b;
    b.type = OpType::kBroadcast;
    b.name = "weights";
    b.shape = {1000};
    b.input = b.output = bufs[0];
    b.root = n - 1;
    b.device = c.rank();
    std::vector<float> h(1000, static_cast<float>(c.rank() + 10));
    (void)cudaMemcpy(bufs[0], h.data(), 4000, cudaMemcpyHostToDevice);
    KV_RETURN_IF_ERROR(RunOp(c.engine(), b));
    c.Check(Download(bufs[0], 1000)[999] == static_cast<float>(n - 1 + 10), "broadcast");
    // A process set of the last rank gets its own NCCL communicator.
    KV_ASSIGN_OR_RETURN(int set, c.engine().AddProcessSet({n - 1}, Deadline::After(60s)));
    if (c.rank() == n - 1) {
      OpRequest r;
      r.name = "set.sum";
      r.shape = {1000};
      r.input = r.output = bufs[1];
      r.device = c.rank();
      r.process_set = set;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
    }
    for (void* p : bufs) api.Free(c.rank(), p);
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

// The trainer/sidecar contract on real CUDA: the child (the "sidecar", which has not touched
// CUDA before it forks... so the fork happens before any CUDA call here) maps the parent's
// allocation by handle, waits on its interprocess event and reads what the parent's stream wrote.
TEST(CudaDeviceApi, AnotherProcessMapsATensorAndWaitsOnItsEvent) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[1]);
    IpcMemHandle mem;
    IpcEventHandle ev;
    int device = -1;
    if (::read(fds[0], &device, sizeof device) != sizeof device) std::_Exit(0);  // no GPU
    if (::read(fds[0], mem.data(), mem.size()) != static_cast<ssize_t>(mem.size()) ||
        ::read(fds[0], ev.data(), ev.size()) != static_cast<ssize_t>(ev.size()))
      std::_Exit(2);
    CudaDeviceApi api;
    auto base = api.OpenMemHandle(device, mem);
    if (!base.ok()) std::_Exit(3);
    auto event = api.OpenEventHandle(device, ev);
    if (!event.ok()) std::_Exit(4);
    if (!PollUntilReady([&] { return api.QueryEvent(*event); }, Deadline::After(30s), "event").ok())
      std::_Exit(5);
    float v = 0;
    if (cudaMemcpy(&v, static_cast<float*>(*base) + 1023, 4, cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        v != 7.0f)
      std::_Exit(6);
    api.DestroyEvent(*event);
    if (!api.CloseMemHandle(device, *base).ok()) std::_Exit(7);
    std::_Exit(0);
  }
  ::close(fds[0]);
  if (CudaDeviceCount() == 0) {
    ::close(fds[1]);
    int st = 0;
    ::waitpid(child, &st, 0);
    GTEST_SKIP() << "no CUDA device: needs a GPU to run";
  }
  CudaDeviceApi api;
  auto p = api.Malloc(0, 4096);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto stream = api.CreateStream(0);
  ASSERT_TRUE(stream.ok());
  std::vector<float> h(1024, 7.0f);
  ASSERT_EQ(cudaMemcpyAsync(*p, h.data(), 4096, cudaMemcpyHostToDevice,
                            static_cast<cudaStream_t>(*stream)),
            cudaSuccess);
  DeviceEvent mine = nullptr;
  auto ev = api.RecordIpcEvent(0, *stream, &mine);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  auto mem = api.ExportMemHandle(*p);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  const int device = 0;
  ASSERT_EQ(::write(fds[1], &device, sizeof device), static_cast<ssize_t>(sizeof device));
  ASSERT_EQ(::write(fds[1], mem->data(), mem->size()), static_cast<ssize_t>(mem->size()));
  ASSERT_EQ(::write(fds[1], ev->data(), ev->size()), static_cast<ssize_t>(ev->size()));
  ::close(fds[1]);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child exit " << WEXITSTATUS(st);
  api.DestroyEvent(mine);
  api.DestroyStream(*stream);
  api.Free(0, *p);
}

}  // namespace
}  // namespace korovod::testing
