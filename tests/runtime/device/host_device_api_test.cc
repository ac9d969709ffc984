// HostDeviceApi: the host-memory stand-in for the CUDA runtime keeps the contract the device
// protocol relies on: a handle names an allocation another process can map (once), a freed
// allocation cannot be opened, a stream runs its work in order, an interprocess event is ready
// only after the work enqueued before its record, and every wait has a deadline.
#include "runtime/device/host_device_api.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace korovod {
namespace {

using namespace std::chrono_literals;

std::string Prefix() { return "/kvhdtest-" + std::to_string(::getpid()) + "-"; }

TEST(HostDeviceApi, AnotherProcessMapsTheAllocationByHandle) {
  HostDeviceApi owner(2, Prefix());
  auto p = owner.Malloc(1, 4096);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::memset(*p, 7, 4096);
  // A pointer inside the allocation exports the whole allocation, as cudaIpcGetMemHandle does.
  auto handle = owner.ExportMemHandle(static_cast<std::byte*>(*p) + 100);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();

  const pid_t child = ::fork();
  if (child == 0) {
    HostDeviceApi importer(2, Prefix());
    auto base = importer.OpenMemHandle(1, *handle);
    if (!base.ok()) std::_Exit(2);
    auto* bytes = static_cast<unsigned char*>(*base);
    if (bytes[0] != 7 || bytes[4095] != 7) std::_Exit(3);
    bytes[10] = 42;  // seen by the owner: the same memory, not a copy
    if (!importer.CloseMemHandle(1, *base).ok()) std::_Exit(4);
    std::_Exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(static_cast<unsigned char*>(*p)[10], 42);
  owner.Free(1, *p);
}

TEST(HostDeviceApi, AHandleOpensOncePerProcessAndOnlyOnItsDevice) {
  HostDeviceApi owner(2, Prefix());
  HostDeviceApi importer(2, Prefix());
  auto p = owner.Malloc(0, 256);
  ASSERT_TRUE(p.ok());
  auto h = owner.ExportMemHandle(*p);
  ASSERT_TRUE(h.ok());
  Status wrong = importer.OpenMemHandle(1, *h).status();
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("is on device 0, not device 1"), std::string::npos)
      << wrong.ToString();
  auto base = importer.OpenMemHandle(0, *h);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(importer.open_imports(), 1);
  Status again = importer.OpenMemHandle(0, *h).status();
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("already open"), std::string::npos) << again.ToString();
  EXPECT_TRUE(importer.CloseMemHandle(0, *base).ok());
  EXPECT_EQ(importer.open_imports(), 0);
  EXPECT_FALSE(importer.CloseMemHandle(0, *base).ok());  // closing twice is an error
  owner.Free(0, *p);
}

TEST(HostDeviceApi, AFreedAllocationCannotBeOpened) {
  HostDeviceApi owner(1, Prefix());
  HostDeviceApi importer(1, Prefix());
  auto p = owner.Malloc(0, 64);
  ASSERT_TRUE(p.ok());
  auto h = owner.ExportMemHandle(*p);
  ASSERT_TRUE(h.ok());
  owner.Free(0, *p);
  Status s = importer.OpenMemHandle(0, *h).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("freed by its owner"), std::string::npos) << s.ToString();
  IpcMemHandle garbage{};
  EXPECT_EQ(importer.OpenMemHandle(0, garbage).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(owner.ExportMemHandle(&garbage).ok());  // not device memory
}

TEST(HostDeviceApi, UuidsNameTheSameDeviceInEveryProcess) {
  HostDeviceApi a(3, Prefix());
  HostDeviceApi b(3, Prefix());
  for (int d = 0; d < 3; ++d) {
    auto u = a.UuidOf(d);
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(*b.DeviceOf(*u), d);
  }
  DeviceUuid other{};
  EXPECT_FALSE(a.DeviceOf(other).ok());
  EXPECT_FALSE(a.UuidOf(3).ok());
  EXPECT_EQ(UuidString(*a.UuidOf(0)).rfind("GPU-", 0), 0u);
}

TEST(HostDeviceApi, AnEventIsReadyOnlyAfterTheWorkBeforeItsRecord) {
  HostDeviceApi trainer(1, Prefix());
  HostDeviceApi sidecar(1, Prefix());
  auto buf = trainer.Malloc(0, 1 << 20);
  ASSERT_TRUE(buf.ok());
  auto stream = trainer.CreateStream(0);
  ASSERT_TRUE(stream.ok());
  std::atomic<bool> release{false};
  // A slow "kernel" that writes the tensor, then the event the consumer waits for.
  ASSERT_TRUE(trainer
                  .Enqueue(*stream,
                           [&] {
                             while (!release.load()) std::this_thread::sleep_for(1ms);
                             std::memset(*buf, 3, 1 << 20);
                           })
                  .ok());
  DeviceEvent mine = nullptr;
  auto eh = trainer.RecordIpcEvent(0, *stream, &mine);
  ASSERT_TRUE(eh.ok()) << eh.status().ToString();
  auto ev = sidecar.OpenEventHandle(0, *eh);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_TRUE(IsNotReady(sidecar.QueryEvent(*ev)));
  EXPECT_TRUE(IsNotReady(trainer.QueryStream(*stream)));
  // A bounded wait on it fails, naming what it waited for.
  Status timed_out = PollUntilReady([&] { return sidecar.QueryEvent(*ev); }, Deadline::After(50ms),
                                    "tensor \"w\": ready event");
  EXPECT_EQ(timed_out.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(timed_out.message().find("tensor \"w\": ready event"), std::string::npos);
  release = true;
  ASSERT_TRUE(
      PollUntilReady([&] { return sidecar.QueryEvent(*ev); }, Deadline::After(10s), "e").ok());
  EXPECT_EQ(static_cast<unsigned char*>(*buf)[(1 << 20) - 1], 3);  // the work is visible
  sidecar.DestroyEvent(*ev);
  trainer.DestroyEvent(mine);
  trainer.DestroyStream(*stream);
  trainer.Free(0, *buf);
}

TEST(HostDeviceApi, AStreamRunsItsCopiesInOrder) {
  HostDeviceApi api(1, Prefix());
  auto a = api.Malloc(0, 1024);
  auto b = api.Malloc(0, 1024);
  ASSERT_TRUE(a.ok() && b.ok());
  auto s = api.CreateStream(0);
  ASSERT_TRUE(s.ok());
  std::memset(*a, 1, 1024);
  ASSERT_TRUE(api.CopyAsync(*b, *a, 1024, *s).ok());                                // b = 1
  ASSERT_TRUE(api.Enqueue(*s, [&] { std::memset(*a, 2, 1024); }).ok());             // a = 2
  ASSERT_TRUE(api.CopyAsync(static_cast<std::byte*>(*b) + 512, *a, 512, *s).ok());  // b[512:] = 2
  ASSERT_TRUE(PollUntilReady([&] { return api.QueryStream(*s); }, Deadline::After(10s), "s").ok());
  EXPECT_EQ(static_cast<unsigned char*>(*b)[0], 1);
  EXPECT_EQ(static_cast<unsigned char*>(*b)[1023], 2);
  EXPECT_FALSE(api.CopyAsync(*b, nullptr, 4, *s).ok());
  api.DestroyStream(*s);
  EXPECT_FALSE(api.QueryStream(*s).ok());  // a destroyed stream is unknown
  api.Free(0, *a);
  api.Free(0, *b);
}

}  // namespace
}  // namespace korovod
