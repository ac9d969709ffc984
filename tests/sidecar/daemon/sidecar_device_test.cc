// GPU tensors through the sidecar, on machines without a GPU: real korovod-sidecar processes run
// with KOROVOD_DEVICE_BACKEND=host, forked trainers hold "device" tensors in HostDeviceApi memory
// (shared memory, opened by handle as CUDA IPC opens a GPU allocation) and submit them with
// Client::DeviceAllreduce / DeviceBroadcast. What a trainer sees: exact results where its tensors
// lie (no copy through the arena), each allocation opened once and a reused address reopened,
// the ready event ordering its stream before the collective, clear errors that leave the sidecar
// serving, and a killed trainer's allocations closed after its last op.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/shared_memory.h"
#include "runtime/device/host_device_api.h"
#include "sidecar/client/client.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar::daemon_test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kHostDevices = {"KOROVOD_DEVICE_BACKEND=host"};

std::string TrainerPrefix() { return "/kvsdtdev-" + std::to_string(::getppid()) + "-"; }

// Removes what killed trainers' host "device" allocations left in /dev/shm: this test process's
// trainers' only (TrainerPrefix: the trainers are its children). ctest runs other tests of this
// file at the same time, whose trainers' allocations are alive.
void SweepTrainerAllocations() {
  const std::string mine = "/kvsdtdev-" + std::to_string(::getpid()) + "-";
  for (const std::string& name : ListShmNames(mine)) ::shm_unlink(name.c_str());
}

// A trainer's view of its device: the same 8 host devices (and UUIDs) as the sidecar's backend.
struct TrainerDevice {
  explicit TrainerDevice(int device) : api(8, TrainerPrefix()), device(device) {}
  void* Malloc(size_t bytes) { return Must(api.Malloc(device, bytes)); }
  DeviceTensorRef Ref(void* allocation, uint64_t allocation_bytes, uint64_t offset) {
    DeviceTensorRef t;
    const DeviceUuid uuid = Must(api.UuidOf(device));
    std::memcpy(t.device_uuid.data(), uuid.data(), uuid.size());
    const IpcMemHandle h = Must(api.ExportMemHandle(allocation));
    std::memcpy(t.mem_handle.data(), h.data(), h.size());
    t.allocation_base = reinterpret_cast<uint64_t>(allocation);
    t.allocation_bytes = allocation_bytes;
    t.offset = offset;
    return t;
  }
  HostDeviceApi api;
  int device;
};

float* At(void* allocation, size_t offset) {
  return reinterpret_cast<float*>(static_cast<std::byte*>(allocation) + offset);
}

void Fill(float* p, size_t n, float v) {
  for (size_t i = 0; i < n; ++i) p[i] = v + static_cast<float>(i % 3);
}

// The value of an unlabelled metric on rank r's /metrics; -1 when absent.
double Metric(Job& job, int r, const std::string& name) {
  int status = 0;
  const std::string text = HttpGet(job.metrics_port(r), "/metrics", &status);
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + key.size());
}

// Waits up to 10 s for rank r's metric to read `want`.
bool MetricBecomes(Job& job, int r, const std::string& name, double want) {
  for (int i = 0; i < 200; ++i) {
    if (Metric(job, r, name) == want) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

TEST(SidecarDevice, TensorsAreReducedWhereTheyLieAndEachAllocationOpensOnce) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);  // one device per rank, as torch.cuda.set_device(local_rank)
    // One allocation holding several tensors (a caching allocator's block), and another.
    constexpr size_t kA = 1 << 20, kB = 4096;
    void* a = dev.Malloc(kA);
    void* b = dev.Malloc(kB);
    const DeviceTensorRef t0 = dev.Ref(a, kA, 0);              // 1000 floats, in place
    const DeviceTensorRef t1 = dev.Ref(a, kA, 64 << 10);       // 500 floats ...
    const DeviceTensorRef t1_out = dev.Ref(a, kA, 512 << 10);  // ... into another place
    const DeviceTensorRef w = dev.Ref(b, kB, 0);               // 256 floats, broadcast
    for (int step = 0; step < 3; ++step) {
      Fill(At(a, 0), 1000, static_cast<float>(rank + step));
      Fill(At(a, 64 << 10), 500, static_cast<float>(10 * rank));
      Fill(At(b, 0), 256, static_cast<float>(100 + rank));
      auto h0 = Must(
          client->DeviceAllreduce(t0, t0, DataType::kFloat32, {1000}, nullptr, {.name = "grad.0"}));
      auto h1 = Must(client->DeviceAllreduce(t1, t1_out, DataType::kFloat32, {500}, nullptr,
                                             {.name = "grad.1", .reduce_op = ReduceOp::kAverage}));
      auto hw = Must(client->DeviceBroadcast(w, DataType::kFloat32, {256}, nullptr,
                                             {.name = "weights", .root = 1}));
      TOK(h0.Wait(Deadline::After(30s)));
      TOK(h1.Wait(Deadline::After(30s)));
      TOK(hw.Wait(Deadline::After(30s)));
      TCHECK(At(a, 0)[999] == static_cast<float>(0 + step + 1 + step) + 2 * (999 % 3));
      TCHECK(At(a, 512 << 10)[499] == (0.0f + 10.0f) / 2 + 499 % 3);
      TCHECK(At(a, 64 << 10)[0] == static_cast<float>(10 * rank));  // input untouched
      TCHECK(At(b, 0)[255] == 101.0f + 255 % 3);
    }
    // A new allocation reported at the old one's address (freed, then reallocated there): the
    // sidecar must drop its mapping of the old one and read the new one.
    void* c = dev.Malloc(8192);
    DeviceTensorRef reused = dev.Ref(c, 8192, 0);
    reused.allocation_base = reinterpret_cast<uint64_t>(b);
    Fill(At(c, 0), 100, static_cast<float>(rank + 1));
    auto hr = Must(client->DeviceAllreduce(reused, reused, DataType::kFloat32, {100}, nullptr,
                                           {.name = "reused"}));
    TOK(hr.Wait(Deadline::After(30s)));
    TCHECK(At(c, 0)[0] == 3.0f);
    // No tensor bytes were staged through the arena.
    TCHECK(client->copy_stats().staged_in_bytes == 0);
  }));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Metric(job, r, "korovod_device_allocations_opened_total"), 3) << "rank " << r;
    EXPECT_EQ(Metric(job, r, "korovod_device_allocations_replaced_total"), 1) << "rank " << r;
    // The trainers are gone: their sessions ended and every mapping was closed.
    EXPECT_TRUE(MetricBecomes(job, r, "korovod_device_allocations_open", 0)) << "rank " << r;
  }
  SweepTrainerAllocations();
}

TEST(SidecarDevice, AllgatherAlltoallAndReduceScatterWriteTheTrainersDeviceOutputs) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    constexpr size_t kBytes = 1 << 16;
    void* a = dev.Malloc(kBytes);
    // Rank r gathers r + 1 rows of 3 floats; 3 rows in all, into the allocation at 32 KiB.
    Fill(At(a, 0), (rank + 1) * 3, static_cast<float>(10 * rank));
    auto g = Must(client->DeviceAllgather(dev.Ref(a, kBytes, 0), dev.Ref(a, kBytes, 32 << 10),
                                          3 * 3 * 4, DataType::kFloat32, {rank + 1, 3}, nullptr,
                                          {.name = "gather"}));
    TOK(g.Wait(Deadline::After(30s)));
    TCHECK(g.shape() == TensorShape({3, 3}));
    TCHECK(At(a, 32 << 10)[0] == 0.0f && At(a, 32 << 10)[3] == 10.0f);
    TCHECK(At(a, 32 << 10)[8] == 10.0f + 8 % 3);
    // Too small an output: refused after negotiation, naming both sizes; the sidecar goes on.
    auto small = Must(client->DeviceAllgather(dev.Ref(a, kBytes, 0), dev.Ref(a, kBytes, 32 << 10),
                                              16, DataType::kFloat32, {rank + 1, 3}, nullptr,
                                              {.name = "gather.small"}));
    TCONTAINS(small.Wait(Deadline::After(30s)).ToString(),
              "device output of 16 bytes is smaller than the 36 bytes received");
    // Alltoall: rank r sends 1 row to rank 0 and r + 1 rows to rank 1 (rows of 2 floats).
    for (int i = 0; i < 2 * (rank + 2); ++i) At(a, 0)[i] = static_cast<float>(10 * rank + i / 2);
    const std::vector<int64_t> splits = {1, rank + 1};
    auto x = Must(client->DeviceAlltoall(dev.Ref(a, kBytes, 0), dev.Ref(a, kBytes, 48 << 10), 8 * 4,
                                         DataType::kFloat32, {rank + 2, 2}, splits, nullptr,
                                         {.name = "exchange"}));
    TOK(x.Wait(Deadline::After(30s)));
    const int64_t got = rank == 0 ? 2 : 3;  // rank 0: a row from each; rank 1: 1 + 2 rows
    TCHECK(x.shape() == TensorShape({got, 2}));
    TCHECK(x.received_splits() ==
           (rank == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{1, 2}));
    TCHECK(At(a, 48 << 10)[2] == (rank == 0 ? 10.0f : 11.0f));
    // Reducescatter of 5 rows of 2: rank 0 gets rows 0-2, rank 1 rows 3-4.
    for (int i = 0; i < 10; ++i) At(a, 0)[i] = static_cast<float>(i * (rank + 1));
    const int rows = rank == 0 ? 3 : 2;
    auto rs = Must(client->DeviceReduceScatter(dev.Ref(a, kBytes, 0), dev.Ref(a, kBytes, 16 << 10),
                                               rows * 2 * 4, DataType::kFloat32, {5, 2}, nullptr,
                                               {.name = "scatter", .reduce_op = ReduceOp::kSum}));
    TOK(rs.Wait(Deadline::After(30s)));
    TCHECK(rs.shape() == TensorShape({rows, 2}));
    const int first = rank == 0 ? 0 : 6;
    for (int i = 0; i < rows * 2; ++i) TCHECK(At(a, 16 << 10)[i] == 3.0f * (first + i));
  }));
  SweepTrainerAllocations();
}

TEST(SidecarDevice, TheReadyEventOrdersTheTrainersStreamBeforeTheCollective) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    void* a = dev.Malloc(4096);
    Fill(At(a, 0), 1000, -1000.0f);  // stale values: must never be what is reduced
    DeviceStream stream = Must(dev.api.CreateStream(rank));
    // The "backward kernel" writes the gradient late; the op is submitted at once, before it.
    TOK(dev.api.Enqueue(stream, [a, rank] {
      std::this_thread::sleep_for(400ms);
      Fill(At(a, 0), 1000, static_cast<float>(rank + 1));
    }));
    DeviceEvent mine = nullptr;
    const IpcEventHandle ev = Must(dev.api.RecordIpcEvent(rank, stream, &mine));
    DeviceEventHandle ready;
    std::memcpy(ready.data(), ev.data(), ev.size());
    const DeviceTensorRef t = dev.Ref(a, 4096, 0);
    auto h = Must(
        client->DeviceAllreduce(t, t, DataType::kFloat32, {1000}, &ready, {.name = "late.grad"}));
    TOK(h.Wait(Deadline::After(30s)));
    TCHECK(At(a, 0)[0] == 3.0f);
    TCHECK(At(a, 0)[998] == 3.0f + 2 * (998 % 3));
    dev.api.DestroyEvent(mine);
    dev.api.DestroyStream(stream);
  }));
  SweepTrainerAllocations();
}

TEST(SidecarDevice, BadDeviceTensorsFailNamingTheTensorAndTheSidecarGoesOn) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    void* gone = dev.Malloc(4096);
    const DeviceTensorRef freed = dev.Ref(gone, 4096, 0);
    dev.api.Free(rank, gone);
    auto h = Must(client->DeviceAllreduce(freed, freed, DataType::kFloat32, {16}, nullptr,
                                          {.name = "freed.grad"}));
    Status s = h.Wait(Deadline::After(30s));
    TCONTAINS(s.ToString(), "tensor \"freed.grad\": opening its device allocation");
    TCONTAINS(s.ToString(), "freed by its owner");
    void* a = dev.Malloc(4096);
    DeviceTensorRef alien = dev.Ref(a, 4096, 0);
    alien.device_uuid.fill(0xab);
    h = Must(client->DeviceAllreduce(alien, alien, DataType::kFloat32, {16}, nullptr,
                                     {.name = "alien.grad"}));
    s = h.Wait(Deadline::After(30s));
    TCONTAINS(s.ToString(), "tensor \"alien.grad\"");
    TCONTAINS(s.ToString(), "GPU-abababab-abab-abab-abab-abababababab");
    // Past the allocation's end: refused by the record's validation, naming the sizes.
    DeviceTensorRef past = dev.Ref(a, 4096, 4000);
    h = Must(client->DeviceAllreduce(past, past, DataType::kFloat32, {100}, nullptr,
                                     {.name = "past.end"}));
    TCONTAINS(h.Wait(Deadline::After(30s)).ToString(), "lies outside its allocation of 4096 bytes");
    // The sidecar still serves good device tensors.
    const DeviceTensorRef ok = dev.Ref(a, 4096, 0);
    Fill(At(a, 0), 16, static_cast<float>(rank));
    h = Must(client->DeviceAllreduce(ok, ok, DataType::kFloat32, {16}, nullptr, {.name = "ok"}));
    TOK(h.Wait(Deadline::After(30s)));
    TCHECK(At(a, 0)[0] == 1.0f);
  }));
  SweepTrainerAllocations();
}

TEST(SidecarDevice, WithoutADeviceBackendGpuTensorsAreRefusedNamingTheSetting) {
  Job job(2, {"KOROVOD_DEVICE_BACKEND=none"});
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    void* a = dev.Malloc(4096);
    const DeviceTensorRef t = dev.Ref(a, 4096, 0);
    auto h = Must(client->DeviceAllreduce(t, t, DataType::kFloat32, {16}, nullptr, {.name = "g"}));
    const std::string s = h.Wait(Deadline::After(30s)).ToString();
    TCONTAINS(s, "tensor \"g\" is in device (GPU) memory, but this sidecar has no device backend");
    TCONTAINS(s, "KOROVOD_DEVICE_BACKEND");
    std::vector<float> in(4, 1.0f), out(4);
    TOK(Must(client->Allreduce(in.data(), out.data(), DataType::kFloat32, {4}, {.name = "cpu"}))
            .Wait(Deadline::After(30s)));
    TCHECK(out[3] == 2.0f);
  }));
  EXPECT_NE(job.Log(0).find("device tensors: none (KOROVOD_DEVICE_BACKEND=none)"),
            std::string::npos)
      << job.Log(0);
  SweepTrainerAllocations();
}

TEST(SidecarDevice, AKilledTrainersAllocationsAreClosedAfterItsLastOpAndTheSidecarServesOn) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  // Rank 0's trainer submits and dies before rank 1 submits: its op still runs on rank 0's
  // sidecar (on the mapping it holds), then the mapping is closed.
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    void* a = dev.Malloc(4096);
    Fill(At(a, 0), 64, 1.0f);
    const DeviceTensorRef t = dev.Ref(a, 4096, 0);
    if (rank == 0) {
      auto h = Must(
          client->DeviceAllreduce(t, t, DataType::kFloat32, {64}, nullptr, {.name = "orphan"}));
      (void)h;
      // Dies once the sidecar has taken the op (mapped its allocation), not before.
      TCHECK(MetricBecomes(job, 0, "korovod_device_allocations_opened_total", 1));
      ::raise(SIGKILL);
    }
    std::this_thread::sleep_for(1500ms);  // rank 0's sidecar has seen its trainer die
    auto h =
        Must(client->DeviceAllreduce(t, t, DataType::kFloat32, {64}, nullptr, {.name = "orphan"}));
    TOK(h.Wait(Deadline::After(30s)));
    TCHECK(At(a, 0)[0] == 2.0f);
  }) == false);  // rank 0's trainer was killed: the run reports it
  EXPECT_TRUE(MetricBecomes(job, 0, "korovod_device_allocations_open", 0));
  EXPECT_EQ(Metric(job, 0, "korovod_device_allocations_opened_total"), 1);
  EXPECT_TRUE(job.Running(0));
  // New trainers on both ranks: the sidecars serve device tensors as before.
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    void* a = dev.Malloc(4096);
    Fill(At(a, 0), 64, static_cast<float>(rank));
    const DeviceTensorRef t = dev.Ref(a, 4096, 0);
    TOK(Must(client->DeviceAllreduce(t, t, DataType::kFloat32, {64}, nullptr, {.name = "next"}))
            .Wait(Deadline::After(30s)));
    TCHECK(At(a, 0)[0] == 1.0f);
  }));
  SweepTrainerAllocations();
}

}  // namespace
}  // namespace korovod::sidecar::daemon_test
