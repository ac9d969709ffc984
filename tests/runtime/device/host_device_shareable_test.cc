// HostDeviceApi's allocations that cross as file descriptors, the CPU stand-in for cuMemCreate
// memory (PyTorch's expandable segments): they have no IPC handle, their pieces are exported as
// descriptors and mapped back to back by the importer, the mapping outlives the owner's free, and
// descriptors that are not memory, or smaller than claimed, are refused by name.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "runtime/device/host_device_api.h"

namespace korovod {
namespace {

std::string Prefix() { return "/kvhdstest-" + std::to_string(::getpid()) + "-"; }

TEST(HostDeviceShareable, AllocationsHaveNoIpcHandleButExportAsDescriptors) {
  HostDeviceApi api(2, Prefix());
  auto p = api.MallocShareable(1, 100);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto h = api.ExportMemHandle(*p);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("has no IPC handle"), std::string::npos);
  auto e = api.ExportShareable(static_cast<std::byte*>(*p) + 50);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->base, reinterpret_cast<uint64_t>(*p));
  EXPECT_EQ(e->bytes, HostDeviceApi::ShareableGranularity());  // rounded up, as CUDA does
  EXPECT_TRUE(e->fd.valid());
  // Ordinary allocations are not exported this way.
  auto plain = api.Malloc(0, 4096);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(api.ExportShareable(*plain).ok());
  api.Free(1, *p);
  api.Free(0, *plain);
}

TEST(HostDeviceShareable, PiecesAreMappedBackToBackAndOutliveTheOwnersFree) {
  HostDeviceApi owner(2, Prefix());
  HostDeviceApi importer(2, Prefix());
  const size_t g = HostDeviceApi::ShareableGranularity();
  void* a = *owner.MallocShareable(0, 2 * g);
  void* b = *owner.MallocShareable(0, g);
  std::memset(a, 1, 2 * g);
  std::memset(b, 2, g);
  ShareableExport ea = std::move(*owner.ExportShareable(a));
  ShareableExport eb = std::move(*owner.ExportShareable(b));
  const ShareableChunk chunks[] = {{ea.fd.get(), ea.bytes}, {eb.fd.get(), eb.bytes}};
  auto base = importer.ImportShareable(1, chunks);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(importer.open_imports(), 1);
  ea.fd.Reset();  // the mapping does not need the descriptors
  eb.fd.Reset();
  auto* view = static_cast<unsigned char*>(*base);
  EXPECT_EQ(view[2 * g - 1], 1);
  EXPECT_EQ(view[2 * g], 2);  // the second piece right after the first
  view[2 * g + 5] = 42;       // the same memory, not a copy
  EXPECT_EQ(static_cast<unsigned char*>(b)[5], 42);
  owner.Free(0, a);
  owner.Free(0, b);
  EXPECT_EQ(view[0], 1);  // still mapped: freed memory is never reused under the importer
  EXPECT_TRUE(importer.CloseShareable(1, *base).ok());
  EXPECT_EQ(importer.open_imports(), 0);
  EXPECT_FALSE(importer.CloseShareable(1, *base).ok());
}

TEST(HostDeviceShareable, DescriptorsThatAreNotSuchMemoryAreRefusedByName) {
  HostDeviceApi owner(2, Prefix());
  HostDeviceApi importer(2, Prefix());
  const size_t g = HostDeviceApi::ShareableGranularity();
  void* a = *owner.MallocShareable(0, g);
  ShareableExport ea = std::move(*owner.ExportShareable(a));
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  Fd s0(pair[0]), s1(pair[1]);
  struct Case {
    ShareableChunk chunk;
    const char* error;
  };
  const Case cases[] = {
      {{s0.get(), g}, "not a memory file"},
      {{ea.fd.get(), 2 * g}, "claims"},
      {{ea.fd.get(), g / 2}, "not a positive multiple of the granularity"},
      {{ea.fd.get(), 0}, "not a positive multiple"},
      {{-1, g}, "fstat"},
  };
  for (const Case& c : cases) {
    auto r = importer.ImportShareable(0, std::span<const ShareableChunk>(&c.chunk, 1));
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos) << r.status().ToString();
  }
  EXPECT_FALSE(importer.ImportShareable(0, {}).ok());
  EXPECT_FALSE(importer.ImportShareable(5, std::span<const ShareableChunk>()).ok());
  EXPECT_EQ(importer.open_imports(), 0);
  owner.Free(0, a);
}

}  // namespace
}  // namespace korovod
