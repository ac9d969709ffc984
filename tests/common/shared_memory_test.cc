// common/shared_memory and common/futex: a segment's name lives exactly as long as its owner says,
// two mappings see the same bytes, failures name the segment and leave nothing in /dev/shm, and a
// futex waiter in another process is woken.
#include "common/shared_memory.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common/futex.h"

namespace korovod {
namespace {

// A name no other test process uses.
std::string UniqueName(const char* what) {
  static int counter = 0;
  return "/kvshmtest-" + std::string(what) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

bool InDevShm(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

TEST(ShmSegment, CreateMapOpenShareBytesAndTheOwnerUnlinks) {
  const std::string name = UniqueName("share");
  {
    auto created = ShmSegment::Create(name, 8192, 0600);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    EXPECT_TRUE(created->owns_name());
    EXPECT_EQ(created->Size().value(), 8192u);
    auto a = created->Map(8192);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    std::memcpy(a->data() + 4096, "hello", 5);

    auto opened = ShmSegment::Open(name);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_FALSE(opened->owns_name());
    auto b = opened->Map(8192, /*reserve_swap=*/false);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(std::memcmp(b->data() + 4096, "hello", 5), 0);
    EXPECT_NE(a->data(), b->data());
    EXPECT_TRUE(InDevShm(name));
  }
  // The opener's destructor left the name; the creator's removed it.
  EXPECT_FALSE(InDevShm(name));
}

TEST(ShmSegment, ModeIsExactWhateverTheUmask) {
  const std::string name = UniqueName("mode");
  const mode_t old = ::umask(077);
  auto seg = ShmSegment::Create(name, 4096, 0660);
  ::umask(old);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  struct stat st {};
  ASSERT_EQ(::fstat(seg->fd(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST(ShmSegment, UnlinkAndKeepNameHandOverTheName) {
  const std::string name = UniqueName("unlink");
  auto seg = ShmSegment::Create(name, 4096, 0600);
  ASSERT_TRUE(seg.ok());
  auto mapping = seg->Map(4096);
  ASSERT_TRUE(mapping.ok());
  ASSERT_TRUE(seg->Unlink().ok());
  EXPECT_FALSE(InDevShm(name));
  mapping->data()[0] = std::byte{1};  // the mapping outlives the name
  // A second unlink fails, naming the segment.
  const Status again = seg->Unlink();
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find(name), std::string::npos) << again.ToString();

  const std::string kept = UniqueName("kept");
  {
    auto k = ShmSegment::Create(kept, 4096, 0600);
    ASSERT_TRUE(k.ok());
    k->KeepName();
  }
  EXPECT_TRUE(InDevShm(kept));
  ASSERT_TRUE(ShmSegment::Open(kept)->Unlink().ok());
  EXPECT_FALSE(InDevShm(kept));
}

TEST(ShmSegment, MovesTransferOwnership) {
  const std::string name = UniqueName("move");
  ShmSegment outer;
  {
    auto seg = ShmSegment::Create(name, 4096, 0600);
    ASSERT_TRUE(seg.ok());
    outer = std::move(seg).value();
  }
  EXPECT_TRUE(InDevShm(name));  // the moved-from segment did not unlink
  EXPECT_TRUE(outer.owns_name());
  outer = ShmSegment();  // assigning over an owner unlinks its name
  EXPECT_FALSE(InDevShm(name));

  ShmMapping m;
  EXPECT_FALSE(m.valid());
  {
    auto seg = ShmSegment::Create(UniqueName("move-map"), 4096, 0600);
    ASSERT_TRUE(seg.ok());
    m = std::move(seg->Map(4096)).value();
  }
  ASSERT_TRUE(m.valid());
  EXPECT_EQ(m.size(), 4096u);
  m.data()[4095] = std::byte{7};  // still mapped after the segment is gone
  m.Reset();
  EXPECT_FALSE(m.valid());
}

TEST(ShmSegment, FailuresNameTheSegmentAndReportErrno) {
  const std::string name = UniqueName("exists");
  auto first = ShmSegment::Create(name, 4096, 0600);
  ASSERT_TRUE(first.ok());
  int err = 0;
  auto second = ShmSegment::Create(name, 4096, 0600, &err);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(err, EEXIST);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(name), std::string::npos);
  EXPECT_TRUE(InDevShm(name)) << "a failed Create removed someone else's segment";

  const std::string missing = UniqueName("missing");
  auto opened = ShmSegment::Open(missing, &err);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(err, ENOENT);
  EXPECT_NE(opened.status().message().find(missing), std::string::npos);

  for (const char* bad : {"", "/", "no-slash", "/a/b"}) {
    auto s = ShmSegment::Create(bad, 4096, 0600);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ShmSegment, AllocateBacksPagesAndMapsTheSize) {
  const std::string name = UniqueName("alloc");
  auto seg = ShmSegment::Create(name, 1 << 20, 0600);
  ASSERT_TRUE(seg.ok());
  EXPECT_TRUE(seg->Allocate(0, 1 << 16).ok());
  EXPECT_TRUE(seg->Allocate(1 << 19, 1 << 16).ok());
  EXPECT_EQ(seg->Size().value(), uint64_t{1} << 20);  // allocating inside keeps the size
}

TEST(ListShmNames, FindsExactlyThePrefixedNames) {
  const std::string prefix = UniqueName("list") + "-";
  auto a = ShmSegment::Create(prefix + "b", 4096, 0600);
  auto b = ShmSegment::Create(prefix + "a", 4096, 0600);
  auto other = ShmSegment::Create(UniqueName("list-other"), 4096, 0600);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  EXPECT_EQ(ListShmNames(prefix), (std::vector<std::string>{prefix + "a", prefix + "b"}));
  // Without the leading "/" too, as the /dev/shm file names read.
  EXPECT_EQ(ListShmNames(prefix.substr(1)).size(), 2u);
  const std::vector<std::string> all = ListShmNames("");
  EXPECT_NE(std::find(all.begin(), all.end(), other->name()), all.end());
  EXPECT_EQ(std::find(all.begin(), all.end(), "/."), all.end());
  EXPECT_TRUE(ListShmNames(UniqueName("none")).empty());
}

TEST(Futex, WakesAWaiterInAnotherProcess) {
  const std::string name = UniqueName("futex");
  auto seg = ShmSegment::Create(name, 4096, 0600);
  ASSERT_TRUE(seg.ok());
  auto mapping = seg->Map(4096);
  ASSERT_TRUE(mapping.ok());
  auto* word = new (mapping->data()) std::atomic<uint32_t>(0);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Waits for 1 for up to 10 s in 1 s sleeps; exit 0 once seen.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (word->load() == 0 && std::chrono::steady_clock::now() < until) {
      FutexWait(*word, 0, std::chrono::seconds(1));
    }
    ::_exit(word->load() == 1 ? 0 : 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  word->store(1);
  FutexWake(*word);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Futex, WaitReturnsWhenTheWordDiffersOrTheTimeoutPasses) {
  std::atomic<uint32_t> word{5};
  const auto start = std::chrono::steady_clock::now();
  FutexWait(word, 4, std::chrono::seconds(10));  // not equal: returns at once
  FutexWait(word, 5, std::chrono::milliseconds(20));
  FutexWait(word, 5, std::chrono::nanoseconds(0));
  FutexWait(word, 5, std::chrono::nanoseconds(-1));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(15));
  EXPECT_LT(took, std::chrono::seconds(5));
}

}  // namespace
}  // namespace korovod
