// GPU tensors in memory without a legacy IPC handle (cuMemCreate: PyTorch's expandable segments),
// on machines without a GPU: real korovod-sidecar processes with KOROVOD_DEVICE_BACKEND=host,
// forked trainers whose "device" allocations are memfds. A trainer sends an allocation's pieces as
// file descriptors on the memory channel (SCM_RIGHTS) and names it by export id in its ops. What a
// trainer sees: exact results where its tensors lie, pieces mapped back to back, each export
// imported once and a reused address re-imported, and clear errors (an id never sent, junk, a
// wrong token, a descriptor that is not memory) that leave the sidecar serving.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/fd_passing.h"
#include "runtime/device/host_device_api.h"
#include "sidecar/arena/arena_layout.h"
#include "sidecar/client/client.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar::daemon_test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kHostDevices = {"KOROVOD_DEVICE_BACKEND=host"};

// A trainer's device: memfd allocations, and a contiguous view of several of them (what an
// expandable segment is to PyTorch: pieces mapped back to back in one range).
struct TrainerDevice {
  explicit TrainerDevice(int device)
      : api(8, "/kvsdmtest-" + std::to_string(::getpid()) + "-"), device(device) {}
  // `pieces` allocations of `piece` bytes viewed as one; their exports in `exports`.
  std::byte* Segment(size_t pieces, size_t piece, std::vector<ShareableExport>* exports) {
    std::vector<ShareableChunk> chunks;
    for (size_t i = 0; i < pieces; ++i) {
      void* p = Must(api.MallocShareable(device, piece));
      exports->push_back(Must(api.ExportShareable(p)));
      chunks.push_back({exports->back().fd.get(), exports->back().bytes});
    }
    return static_cast<std::byte*>(Must(api.ImportShareable(device, chunks)));
  }
  DeviceTensorRef Ref(uint64_t export_id, const std::byte* base, uint64_t bytes, uint64_t offset) {
    DeviceTensorRef t;
    const DeviceUuid uuid = Must(api.UuidOf(device));
    std::memcpy(t.device_uuid.data(), uuid.data(), uuid.size());
    std::memcpy(t.mem_handle.data(), &export_id, sizeof export_id);
    t.handle_kind = kDeviceHandleExported;
    t.allocation_base = reinterpret_cast<uint64_t>(base);
    t.allocation_bytes = bytes;
    t.offset = offset;
    return t;
  }
  HostDeviceApi api;
  int device;
};

Status Send(Client& client, uint64_t id, const std::vector<ShareableExport>& exports) {
  MemoryExport e{id, {}};
  std::vector<int> fds;
  for (const ShareableExport& x : exports) {
    e.piece_bytes.push_back(x.bytes);
    fds.push_back(x.fd.get());
  }
  return client.SendDeviceMemory({e}, fds);
}

float* At(std::byte* base, size_t offset) { return reinterpret_cast<float*>(base + offset); }

double Metric(Job& job, int r, const std::string& name) {
  int status = 0;
  const std::string text = HttpGet(job.metrics_port(r), "/metrics", &status);
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + key.size());
}

TEST(SidecarDeviceMemory, ExportedPiecesAreReducedWhereTheyLieAndImportedOnce) {
  Job job(2, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    const size_t g = HostDeviceApi::ShareableGranularity();
    constexpr size_t kPieces = 3;
    std::vector<ShareableExport> exports;
    std::byte* seg = dev.Segment(kPieces, 4 * g, &exports);
    const uint64_t seg_bytes = kPieces * 4 * g;
    TOK(Send(*client, 1, exports));
    // A tensor that spans all three pieces, reduced in place, and another beside it.
    const size_t n = (seg_bytes - 2 * g) / sizeof(float);
    const DeviceTensorRef t = dev.Ref(1, seg, seg_bytes, g);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < n; ++i) At(seg, g)[i] = static_cast<float>(rank + step + i % 5);
      auto h = Must(client->DeviceAllreduce(t, t, DataType::kFloat32, {static_cast<int64_t>(n)},
                                            nullptr, {.name = "segment.grad"}));
      TOK(h.Wait(Deadline::After(30s)));
      for (size_t i : {size_t{0}, n / 2, n - 1}) {
        TCHECK(At(seg, g)[i] == static_cast<float>(1 + 2 * step + 2 * (i % 5)));
      }
    }
    // The trainer's allocator unmapped that segment and mapped another at the same address: a
    // new export id there is a new allocation, and the old import is closed.
    std::vector<ShareableExport> again;
    std::byte* other = dev.Segment(1, g, &again);
    TOK(Send(*client, 2, again));
    DeviceTensorRef reused = dev.Ref(2, other, g, 0);
    reused.allocation_base = reinterpret_cast<uint64_t>(seg);
    At(other, 0)[0] = static_cast<float>(rank + 1);
    auto h = Must(client->DeviceAllreduce(reused, reused, DataType::kFloat32, {1}, nullptr,
                                          {.name = "reused"}));
    TOK(h.Wait(Deadline::After(30s)));
    TCHECK(At(other, 0)[0] == 3.0f);
    TCHECK(client->copy_stats().staged_in_bytes == 0);
  }));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Metric(job, r, "korovod_device_allocations_opened_total"), 2) << "rank " << r;
    EXPECT_EQ(Metric(job, r, "korovod_device_allocations_replaced_total"), 1) << "rank " << r;
  }
}

// A raw memory channel message with `fds` attached; the sidecar's answer.
Status Raw(const std::string& path, const std::vector<std::byte>& bytes,
           const std::vector<int>& fds) {
  auto s = ConnectSeqPacket(path);
  if (!s.ok()) return s.status();
  KV_RETURN_IF_ERROR(SendWithFds(s->get(), bytes, fds, Deadline::After(10s)));
  MemoryFdReply reply{};
  auto* p = reinterpret_cast<std::byte*>(&reply);
  auto got =
      ReceiveWithFds(s->get(), std::span<std::byte>(p, sizeof reply), 0, Deadline::After(10s));
  if (!got.ok()) return got.status();
  return DecodeMemoryFdReply(std::span<const std::byte>(p, got->bytes));
}

TEST(SidecarDeviceMemory, BadMessagesAndMissingDescriptorsFailByNameAndTheSidecarGoesOn) {
  Job job(1, kHostDevices);
  ASSERT_TRUE(job.WaitReady());
  const std::string path = job.socket(0) + ".mem";
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TrainerDevice dev(rank);
    const size_t g = HostDeviceApi::ShareableGranularity();
    std::vector<ShareableExport> exports;
    std::byte* seg = dev.Segment(1, g, &exports);
    // An op naming an export id whose descriptors never came.
    auto h = Must(client->DeviceAllreduce(dev.Ref(7, seg, g, 0), dev.Ref(7, seg, g, 0),
                                          DataType::kFloat32, {4}, nullptr, {.name = "unsent"}));
    const std::string unsent = h.Wait(Deadline::After(30s)).ToString();
    TCONTAINS(unsent, "tensor \"unsent\": opening its device allocation");
    TCONTAINS(unsent, "no file descriptors were received for export id 7");
    // Junk, a wrong token, and a count that does not match the descriptors attached.
    TCONTAINS(Raw(path, std::vector<std::byte>(40, std::byte{1}), {}).ToString(), "bad magic");
    MemoryFdMessage m;
    m.exports.push_back(MemoryExport{8, {g}});
    const std::vector<std::byte> wrong_token = Must(EncodeMemoryFdMessage(m));
    TCONTAINS(Raw(path, wrong_token, {exports[0].fd.get()}).ToString(),
              "not the current session's");
    TCONTAINS(Raw(path, wrong_token, {}).ToString(), "1 pieces but 0 file descriptors");
    // A descriptor that is not memory: accepted on the channel, refused at import by name.
    int pair[2];
    TCHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    Fd s0(pair[0]), s1(pair[1]);
    TOK(client->SendDeviceMemory({MemoryExport{9, {g}}}, std::vector<int>{s0.get()}));
    h = Must(client->DeviceAllreduce(dev.Ref(9, seg, g, 0), dev.Ref(9, seg, g, 0),
                                     DataType::kFloat32, {4}, nullptr, {.name = "socket"}));
    TCONTAINS(h.Wait(Deadline::After(30s)).ToString(), "not a memory file");
    // The same id twice in a session is refused; the sidecar goes on serving good memory.
    TOK(Send(*client, 10, exports));
    TCONTAINS(Send(*client, 10, exports).ToString(), "export id 10 is already held");
    At(seg, 0)[0] = 5.0f;
    h = Must(client->DeviceAllreduce(dev.Ref(10, seg, g, 0), dev.Ref(10, seg, g, 0),
                                     DataType::kFloat32, {1}, nullptr, {.name = "good"}));
    TOK(h.Wait(Deadline::After(30s)));
    TCHECK(At(seg, 0)[0] == 5.0f);
  }));
}

}  // namespace
}  // namespace korovod::sidecar::daemon_test
