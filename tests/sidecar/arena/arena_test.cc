// The arena: creation by the sidecar, opening by a client in another process, the errors a
// client gets for something that is not (this version of) an arena, permissions and unlinking.
#include "sidecar/arena/arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>

#include "tests/sidecar/arena/protocol_test_util.h"

namespace korovod::sidecar {
namespace {

using testing::SmallSizes;
using testing::UniqueArenaName;
using testing::WaitChild;

bool ShmExists(const std::string& name) {
  struct stat st {};
  return ::stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(ArenaLayoutTest, RegionsArePageAlignedInOrderAndDisjoint) {
  ArenaSizes s = SmallSizes(16);
  s.client_heap_bytes = 10000;  // rounded up to pages
  auto l = ComputeArenaLayout(s);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const Region regions[] = {l->submission_queue, l->completion_queue, l->client_heap,
                            l->result_heap};
  uint64_t at = kArenaPageBytes;
  for (const Region& r : regions) {
    EXPECT_EQ(r.offset, at);
    EXPECT_EQ(r.offset % kArenaPageBytes, 0u);
    EXPECT_EQ(r.bytes % kArenaPageBytes, 0u);
    at += r.bytes;
  }
  EXPECT_EQ(l->total_bytes, at);
  EXPECT_GE(l->submission_queue.bytes, 16 * sizeof(SubmissionRecord));
  EXPECT_GE(l->completion_queue.bytes, 16 * sizeof(CompletionRecord));
  EXPECT_EQ(l->client_heap.bytes, 12288u);
}

TEST(ArenaLayoutTest, BadSizesAreNamed) {
  struct Case {
    ArenaSizes sizes;
    const char* field;
  };
  auto with = [](auto f) {
    ArenaSizes s = SmallSizes();
    f(s);
    return s;
  };
  const Case cases[] = {
      {with([](ArenaSizes& s) { s.submission_slots = 3; }), "submission_slots is 3"},
      {with([](ArenaSizes& s) { s.submission_slots = 1; }), "submission_slots is 1"},
      {with([](ArenaSizes& s) { s.completion_slots = 0; }), "completion_slots is 0"},
      {with([](ArenaSizes& s) { s.completion_slots = 1u << 17; }), "completion_slots is 131072"},
      {with([](ArenaSizes& s) { s.client_heap_bytes = 0; }), "client_heap_bytes is 0"},
      {with([](ArenaSizes& s) { s.result_heap_bytes = kMaxHeapBytes + 1; }),
       "result_heap_bytes is"},
  };
  for (const Case& c : cases) {
    auto l = ComputeArenaLayout(c.sizes);
    ASSERT_FALSE(l.ok()) << c.field;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find(c.field), std::string::npos) << l.status().message();
  }
}

TEST(ArenaLayoutTest, RecordHelpers) {
  SubmissionRecord r{};
  ASSERT_TRUE(SetName(r, "layer1.weight").ok());
  EXPECT_EQ(NameOf(r), "layer1.weight");
  EXPECT_FALSE(SetName(r, std::string(kMaxNameBytes + 1, 'x')).ok());
  ASSERT_TRUE(SetName(r, std::string(kMaxNameBytes, 'y')).ok());
  EXPECT_EQ(NameOf(r).size(), kMaxNameBytes);
  EXPECT_FALSE(SetName(r, std::string("a\0b", 3)).ok());

  CompletionRecord c{};
  SetStatus(c, OkStatus());
  EXPECT_TRUE(StatusOf(c).ok());
  SetStatus(c, Unavailable("rank 2 (10.0.0.3:29500) is gone"));
  EXPECT_EQ(StatusOf(c).code(), StatusCode::kUnavailable);
  EXPECT_EQ(StatusOf(c).message(), "rank 2 (10.0.0.3:29500) is gone");
  EXPECT_EQ(c.flags & kCompleteMessageTruncated, 0);
  SetStatus(c, Internal(std::string(1000, 'm')));
  EXPECT_NE(c.flags & kCompleteMessageTruncated, 0);
  EXPECT_EQ(c.message_len, kMaxMessageBytes);
  EXPECT_EQ(StatusOf(c).message(), std::string(kMaxMessageBytes, 'm') + " [truncated]");
  c.status = 200;
  EXPECT_EQ(StatusOf(c).code(), StatusCode::kInternal);
  EXPECT_NE(StatusOf(c).message().find("unknown status code 200"), std::string::npos);
  c.message_len = 60000;  // clamped
  EXPECT_LE(StatusOf(c).message().size(), kMaxMessageBytes + 100);
}

TEST(ArenaTest, CreateThenOpenInForkedChild) {
  const std::string name = UniqueArenaName("fork");
  auto created = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Arena& sidecar = **created;
  EXPECT_EQ(sidecar.side(), ArenaSide::kSidecar);
  EXPECT_FALSE(sidecar.peer_alive());
  std::memset(sidecar.client_heap().data(), 0x5a, 4096);
  const ArenaLayout parent_layout = sidecar.layout();

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    {
      auto opened = Arena::Open(name);
      if (!opened.ok()) {
        std::fprintf(stderr, "child: %s\n", opened.status().ToString().c_str());
        ::_exit(10);
      }
      Arena& client = **opened;
      if (client.side() != ArenaSide::kClient) code = 11;
      if (!(client.layout() == parent_layout)) code = 12;
      if (!client.peer_alive()) code = 13;
      for (int i = 0; i < 4096; ++i) {
        if (client.client_heap()[i] != std::byte{0x5a}) code = 14;
      }
      std::memset(client.result_heap().data() + 128, 0xc3, 64);
    }  // detaches
    ::_exit(code);
  }
  EXPECT_EQ(WaitChild(pid), 0);
  for (int i = 128; i < 192; ++i) EXPECT_EQ(sidecar.result_heap()[i], std::byte{0xc3});
  EXPECT_EQ(sidecar.header().client_generation.value.load(), 1u);
  EXPECT_FALSE(sidecar.peer_alive());  // the child detached
  EXPECT_EQ(sidecar.header().client_pid.value.load(), static_cast<uint32_t>(pid));
}

TEST(ArenaTest, ModeIs0660WhateverTheUmask) {
  const mode_t old = ::umask(0077);
  const std::string name = UniqueArenaName("mode");
  auto a = Arena::Create(name, SmallSizes());
  ::umask(old);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
}

// A live sidecar's arena (its lock is held) is refused; one left by a dead sidecar (the lock is
// free: here a bare segment nobody locked) is reclaimed, as a restarted sidecar needs.
TEST(ArenaTest, CreateRefusesALiveArenaAndReclaimsAStaleOne) {
  const std::string name = UniqueArenaName("excl");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  auto b = Arena::Create(name, SmallSizes());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("arena " + name + " is in use by a running sidecar"),
            std::string::npos)
      << b.status().message();
  // The failed create did not remove the first arena's name.
  EXPECT_TRUE(ShmExists(name));

  const std::string stale = UniqueArenaName("stale");
  auto left = ShmSegment::Create(stale, 4096, 0600);
  ASSERT_TRUE(left.ok());
  left->KeepName();  // as a killed sidecar leaves it
  auto c = Arena::Create(stale, SmallSizes());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto client = Arena::Open(stale);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
}

// A client tells a live sidecar from a dead one by the arena's lock, and a restart by the name.
TEST(ArenaTest, TheClientSeesTheSidecarGoneAndReplaced) {
  const std::string name = UniqueArenaName("gone");
  auto sidecar = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(sidecar.ok());
  auto client = Arena::Open(name);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->CheckSidecar(std::chrono::seconds(60)).ok());
  // What a SIGKILL leaves: the lock released with the last descriptor, the flag still set.
  (*sidecar)->header().sidecar_alive.value.store(1);
  ASSERT_TRUE((*sidecar)->Unlink().ok());
  sidecar->reset();
  (*client)->header().sidecar_alive.value.store(1);
  Status gone = (*client)->CheckSidecar(std::chrono::seconds(60));
  EXPECT_EQ(gone.code(), StatusCode::kUnavailable) << gone.ToString();
  EXPECT_NE(gone.message().find("died without shutting down"), std::string::npos) << gone.ToString();
  EXPECT_FALSE((*client)->Replaced());
  auto restarted = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(restarted.ok());
  EXPECT_TRUE((*client)->Replaced());
  EXPECT_NE((*client)->CheckSidecar(std::chrono::seconds(60)).message().find("(restarted)"),
            std::string::npos);
}

TEST(ArenaTest, UnlinkRemovesTheNameButKeepsTheMapping) {
  const std::string name = UniqueArenaName("unlink");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  auto client = Arena::Open(name);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*a)->Unlink().ok());
  EXPECT_FALSE(ShmExists(name));
  (*client)->client_heap()[7] = std::byte{42};
  EXPECT_EQ((*a)->client_heap()[7], std::byte{42});
  auto again = Arena::Open(name);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("does not exist"), std::string::npos);
  EXPECT_FALSE((*a)->Unlink().ok());  // already gone
}

TEST(ArenaTest, SidecarDestructionUnlinksAndMarksDead) {
  const std::string name = UniqueArenaName("dtor");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  auto client = Arena::Open(name);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->peer_alive());
  EXPECT_TRUE((*a)->peer_alive());
  a->reset();
  EXPECT_FALSE(ShmExists(name));
  EXPECT_FALSE((*client)->peer_alive());
  EXPECT_NE((*client)->header().submission.closed.value.load(), 0u);
}

TEST(ArenaTest, OpenOfAMissingArenaSaysSo) {
  const std::string name = UniqueArenaName("missing");
  auto a = Arena::Open(name);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("arena " + name + " does not exist"), std::string::npos);
}

TEST(ArenaTest, BadNamesAreRefused) {
  for (const char* bad : {"", "/", "no-slash", "/a/b", "//x"}) {
    auto c = Arena::Create(bad, SmallSizes());
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    auto o = Arena::Open(bad);
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  }
  auto c = Arena::Create("/" + std::string(255, 'n'), SmallSizes());
  EXPECT_FALSE(c.ok());
}

TEST(ArenaTest, VersionMismatchIsExplained) {
  const std::string name = UniqueArenaName("version");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  (*a)->header().protocol_version = kProtocolVersion + 2;
  auto c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  const std::string want = "arena " + name + ": protocol version " +
                           std::to_string(kProtocolVersion + 2) + ", this client speaks " +
                           std::to_string(kProtocolVersion);
  EXPECT_EQ(c.status().message().rfind(want, 0), 0u) << c.status().message();
  // A refused open leaves the sidecar's arena untouched.
  EXPECT_EQ((*a)->header().submission.closed.value.load(), 0u);
  EXPECT_FALSE((*a)->peer_alive());
}

TEST(ArenaTest, MagicMismatchIsExplained) {
  const std::string name = UniqueArenaName("magic");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  (*a)->header().magic.store(0x1234);
  auto c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("arena " + name + " is not a korovod arena (magic "),
            std::string::npos)
      << c.status().message();
  (*a)->header().magic.store(0);
  c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("not initialised"), std::string::npos);
}

TEST(ArenaTest, ForeignShmObjectIsRefused) {
  const std::string name = UniqueArenaName("foreign");
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100), 0);
  auto c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is 100 bytes, smaller than its 4096-byte header"),
            std::string::npos)
      << c.status().message();
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);  // large enough, but zeros
  c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not initialised"), std::string::npos);
  ::close(fd);
  ::shm_unlink(name.c_str());
}

TEST(ArenaTest, CorruptHeaderIsRefused) {
  const std::string name = UniqueArenaName("corrupt");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  ArenaHeader& h = (*a)->header();
  const ArenaLayout good = h.layout;

  h.layout.client_heap.offset += kArenaPageBytes;
  auto c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("region offsets do not match"), std::string::npos)
      << c.status().message();

  h.layout = good;
  h.layout.submission_slots = 5;
  c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("corrupt header: arena submission_slots is 5"),
            std::string::npos)
      << c.status().message();

  h.layout = good;
  h.submission_record_bytes = 512;
  c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("corrupt header"), std::string::npos);
  h.submission_record_bytes = sizeof(SubmissionRecord);

  // The file grew behind the header's back.
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(good.total_bytes + kArenaPageBytes)), 0);
  ::close(fd);
  c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("header says " + std::to_string(good.total_bytes) +
                                      " bytes, the file has"),
            std::string::npos)
      << c.status().message();
}

TEST(ArenaTest, OneClientAtATime) {
  const std::string name = UniqueArenaName("single");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  auto first = Arena::Open(name);
  ASSERT_TRUE(first.ok());
  auto second = Arena::Open(name);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("already has a client attached (pid " +
                                           std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.status().message();
  // A client that vanished without detaching: the sidecar releases it.
  (*a)->ReleaseClient();
  auto third = Arena::Open(name);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ((*a)->header().client_generation.value.load(), 2u);
}

TEST(ArenaTest, OpenAfterTheSidecarShutDownIsRefused) {
  const std::string name = UniqueArenaName("dead");
  auto a = Arena::Create(name, SmallSizes());
  ASSERT_TRUE(a.ok());
  (*a)->header().sidecar_alive.value.store(0);
  auto c = Arena::Open(name);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("sidecar has shut down"), std::string::npos);
}

uint64_t DevShmBytes() {
  struct statvfs vfs {};
  EXPECT_EQ(::statvfs("/dev/shm", &vfs), 0);
  return static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
}

uint64_t BackedBytes(const std::string& name) {
  struct stat st {};
  EXPECT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST(ArenaTest, ReservingMoreThanDevShmAtCreationIsAClearError) {
  ArenaSizes s = SmallSizes();
  s.result_heap_bytes = kMaxHeapBytes;  // 1 TiB
  s.heap_reserve_bytes = kMaxHeapBytes;
  if (DevShmBytes() >= s.result_heap_bytes) GTEST_SKIP() << "/dev/shm can hold 1 TiB here";
  const std::string name = UniqueArenaName("huge");
  auto a = Arena::Create(name, s);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("cannot reserve"), std::string::npos) << a.status().message();
  EXPECT_FALSE(ShmExists(name));  // nothing left behind
}

// A heap is address space until used: only heap_reserve_bytes is backed at creation, Reserve
// backs more as it grows (on either side), and growth past /dev/shm is an error naming it.
TEST(ArenaTest, HeapsAreBackedAsTheyGrow) {
  ArenaSizes s = SmallSizes();
  s.client_heap_bytes = uint64_t{1} << 30;
  s.result_heap_bytes = kMaxHeapBytes;  // 1 TiB of address space
  s.heap_reserve_bytes = 1 << 20;
  const std::string name = UniqueArenaName("grow");
  auto a = Arena::Create(name, s);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const uint64_t at_start = BackedBytes(name);
  EXPECT_LT(at_start, uint64_t{4} << 20);
  EXPECT_EQ((*a)->reserved(ArenaHeap::kClient), uint64_t{1} << 20);

  // The client side (another mapping, as the trainer has) grows the client heap.
  auto c = Arena::Open(name);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Reserve(ArenaHeap::kClient, 20 << 20).ok());
  EXPECT_EQ((*c)->reserved(ArenaHeap::kClient), uint64_t{24} << 20);  // whole 8 MiB steps
  EXPECT_GE(BackedBytes(name), at_start + (uint64_t{19} << 20));
  std::memset((*c)->client_heap().data() + (uint64_t{24} << 20) - 4096, 0x5a, 4096);
  EXPECT_EQ(static_cast<uint8_t>((*a)->client_heap()[(uint64_t{24} << 20) - 1]), 0x5au);
  // Already backed: nothing to do.
  ASSERT_TRUE((*c)->Reserve(ArenaHeap::kClient, 1 << 20).ok());
  // Past the heap: refused.
  auto past = (*c)->Reserve(ArenaHeap::kClient, (uint64_t{1} << 30) + 1);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);

  if (DevShmBytes() >= kMaxHeapBytes) GTEST_SKIP() << "/dev/shm can hold 1 TiB here";
  auto full = (*a)->Reserve(ArenaHeap::kResult, kMaxHeapBytes);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.code(), StatusCode::kUnavailable);
  EXPECT_NE(full.message().find("cannot grow the result heap"), std::string::npos)
      << full.message();
  EXPECT_NE(full.message().find("/dev/shm"), std::string::npos);
}

}  // namespace
}  // namespace korovod::sidecar
