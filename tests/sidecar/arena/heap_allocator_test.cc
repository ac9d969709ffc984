// The heap allocator: alignment, first fit, coalescing, errors, and random sequences checked
// against a reference model (a bitmap of 64-byte units).
#include "sidecar/arena/heap_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace korovod::sidecar {
namespace {

constexpr uint64_t kUnit = HeapAllocator::kAlignment;

TEST(HeapAllocatorTest, BlocksAre64ByteAlignedAndRoundedUp) {
  HeapAllocator h(1 << 16);
  auto a = h.Allocate(1);
  auto b = h.Allocate(65);
  auto c = h.Allocate(0);  // still a distinct block
  auto d = h.Allocate(64);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 64u);
  EXPECT_EQ(*c, 192u);
  EXPECT_EQ(*d, 256u);
  EXPECT_EQ(*h.BlockBytes(*a), 64u);
  EXPECT_EQ(*h.BlockBytes(*b), 128u);
  EXPECT_EQ(*h.BlockBytes(*c), 64u);
  const HeapStats s = h.stats();
  EXPECT_EQ(s.used_bytes, 320u);
  EXPECT_EQ(s.allocations, 4u);
  EXPECT_EQ(s.largest_free_block, (1u << 16) - 320);
}

TEST(HeapAllocatorTest, CapacityIsRoundedDown) {
  HeapAllocator h(1000);
  EXPECT_EQ(h.capacity(), 960u);
  EXPECT_TRUE(h.Allocate(960).ok());
  EXPECT_FALSE(h.Allocate(1).ok());
  HeapAllocator empty(10);
  EXPECT_EQ(empty.capacity(), 0u);
  EXPECT_FALSE(empty.Allocate(0).ok());
}

TEST(HeapAllocatorTest, FirstFitTakesTheLowestBlockThatFits) {
  HeapAllocator h(4096);
  std::vector<uint64_t> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(*h.Allocate(256));
  ASSERT_TRUE(h.Free(blocks[1]).ok());  // 256 bytes at 256
  ASSERT_TRUE(h.Free(blocks[4]).ok());  // 256 at 1024
  ASSERT_TRUE(h.Free(blocks[5]).ok());  // ... coalesced to 512 at 1024
  EXPECT_EQ(*h.Allocate(300), 1024u);   // the first hole is too small
  EXPECT_EQ(*h.Allocate(100), 256u);    // the first hole fits
  EXPECT_EQ(*h.Allocate(100), 384u);
  EXPECT_EQ(*h.Allocate(64), 1024u + 320);
}

TEST(HeapAllocatorTest, FreeCoalescesWithBothNeighbours) {
  HeapAllocator h(1024);
  const uint64_t a = *h.Allocate(256), b = *h.Allocate(256), c = *h.Allocate(256);
  const uint64_t d = *h.Allocate(256);
  ASSERT_TRUE(h.Free(a).ok());
  ASSERT_TRUE(h.Free(c).ok());
  EXPECT_EQ(h.stats().free_blocks, 2u);
  ASSERT_TRUE(h.Free(b).ok());  // joins a and c
  EXPECT_EQ(h.stats().free_blocks, 1u);
  EXPECT_EQ(h.stats().largest_free_block, 768u);
  ASSERT_TRUE(h.Free(d).ok());
  EXPECT_EQ(h.stats().free_blocks, 1u);
  EXPECT_EQ(h.stats().largest_free_block, 1024u);
  EXPECT_EQ(h.stats().used_bytes, 0u);
  EXPECT_EQ(*h.Allocate(1024), 0u);
}

TEST(HeapAllocatorTest, ExhaustionNamesTheHeapAndSizes) {
  HeapAllocator h(4096, "result heap");
  const uint64_t a = *h.Allocate(1024);
  ASSERT_TRUE(h.Allocate(1024).ok());
  ASSERT_TRUE(h.Free(a).ok());
  auto big = h.Allocate(3000);  // 3072 free in total, but in two pieces
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(big.status().message().rfind("result heap: cannot allocate 3000 bytes (3072 of 4096 "
                                         "bytes free, largest free block 2048)",
                                         0),
            0u)
      << big.status().message();
  auto huge = h.Allocate(~uint64_t{0});  // no overflow in the rounding
  EXPECT_FALSE(huge.ok());
}

TEST(HeapAllocatorTest, DoubleFreeAndUnknownOffsetsAreErrors) {
  HeapAllocator h(4096, "client heap");
  const uint64_t a = *h.Allocate(256);
  const uint64_t b = *h.Allocate(256);
  ASSERT_TRUE(h.Free(a).ok());
  Status s = h.Free(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "client heap: double free of offset 0 (it is already free)");
  s = h.Free(b + 64);  // inside an allocated block
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("free of offset 320, which is not the start of an allocated block"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(h.Free(1 << 20).ok());  // beyond the heap
  EXPECT_FALSE(h.Free(2048).ok());     // in free space never allocated: reads as a double free
  EXPECT_FALSE(h.BlockBytes(a).ok());
  // The errors changed nothing.
  EXPECT_EQ(h.stats().used_bytes, 256u);
  EXPECT_TRUE(h.Free(b).ok());
  EXPECT_EQ(h.stats().free_blocks, 1u);
}

// Reference: a bitmap of 64-byte units; first fit is the lowest run of free units that is long
// enough (the allocator keeps free blocks coalesced, so its blocks are exactly the maximal runs).
class Model {
 public:
  explicit Model(uint64_t capacity) : used_(capacity / kUnit, false) {}
  // The offset first fit must return, or -1.
  int64_t FirstFit(uint64_t bytes) const {
    const size_t need = bytes == 0 ? 1 : (bytes + kUnit - 1) / kUnit;
    size_t run = 0;
    for (size_t i = 0; i < used_.size(); ++i) {
      run = used_[i] ? 0 : run + 1;
      if (run == need) return static_cast<int64_t>((i + 1 - need) * kUnit);
    }
    return -1;
  }
  void Mark(uint64_t offset, uint64_t bytes, bool used) {
    const size_t units = bytes == 0 ? 1 : (bytes + kUnit - 1) / kUnit;
    for (size_t i = offset / kUnit; i < offset / kUnit + units; ++i) {
      ASSERT_NE(used_[i], used) << "unit " << i;
      used_[i] = used;
    }
  }
  HeapStats Stats() const {
    HeapStats s;
    s.capacity = used_.size() * kUnit;
    size_t run = 0;
    for (size_t i = 0; i <= used_.size(); ++i) {
      const bool free = i < used_.size() && !used_[i];
      if (free) {
        ++run;
        continue;
      }
      if (run > 0) {
        ++s.free_blocks;
        s.largest_free_block = std::max<uint64_t>(s.largest_free_block, run * kUnit);
      }
      run = 0;
      if (i < used_.size()) s.used_bytes += kUnit;
    }
    return s;
  }

 private:
  std::vector<bool> used_;
};

TEST(HeapAllocatorTest, RandomSequencesMatchAReferenceModel) {
  constexpr uint64_t kCapacity = 256 << 10;
  for (uint64_t seed : {1u, 2u, 3u}) {
    std::mt19937_64 rng(seed);
    HeapAllocator h(kCapacity);
    Model model(kCapacity);
    std::map<uint64_t, uint64_t> live;  // offset -> requested bytes
    for (int step = 0; step < 20000; ++step) {
      const unsigned dice = rng() % 100;
      if (dice < 55 || live.empty()) {
        uint64_t bytes;
        switch (rng() % 4) {
          case 0:
            bytes = rng() % 128;
            break;
          case 1:
            bytes = rng() % 4096;
            break;
          case 2:
            bytes = rng() % 32768;
            break;
          default:
            bytes = rng() % (kCapacity + 1024);
        }
        const int64_t want = model.FirstFit(bytes);
        auto got = h.Allocate(bytes);
        if (want < 0) {
          ASSERT_FALSE(got.ok()) << "step " << step << ": " << bytes << " bytes";
          ASSERT_EQ(got.status().code(), StatusCode::kUnavailable);
          continue;
        }
        ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status().ToString();
        ASSERT_EQ(*got, static_cast<uint64_t>(want)) << "step " << step;
        ASSERT_EQ(*got % kUnit, 0u);
        model.Mark(*got, bytes, true);
        live[*got] = bytes;
      } else if (dice < 97) {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        ASSERT_TRUE(h.Free(it->first).ok()) << "step " << step;
        model.Mark(it->first, it->second, false);
        live.erase(it);
      } else {  // a bogus free changes nothing
        const uint64_t off = rng() % (kCapacity + 4096);
        if (live.count(off) == 0) {
          ASSERT_FALSE(h.Free(off).ok()) << off;
        }
      }
      if (step % 97 == 0) {
        const HeapStats want = model.Stats();
        const HeapStats got = h.stats();
        ASSERT_EQ(got.used_bytes, want.used_bytes) << "step " << step;
        ASSERT_EQ(got.free_blocks, want.free_blocks) << "step " << step;
        ASSERT_EQ(got.largest_free_block, want.largest_free_block) << "step " << step;
        ASSERT_EQ(got.allocations, live.size());
      }
    }
    for (const auto& [off, bytes] : live) ASSERT_TRUE(h.Free(off).ok());
    EXPECT_EQ(h.stats().used_bytes, 0u);
    EXPECT_EQ(h.stats().free_blocks, 1u);
    EXPECT_EQ(h.stats().largest_free_block, kCapacity);
  }
}

TEST(HeapAllocatorTest, ConcurrentUseFromSeveralThreads) {
  HeapAllocator h(1 << 20);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<uint64_t> mine;
      for (int i = 0; i < 5000; ++i) {
        if (mine.size() < 20 && rng() % 2 == 0) {
          auto a = h.Allocate(rng() % 2000);
          if (a.ok()) mine.push_back(*a);
        } else if (!mine.empty()) {
          if (!h.Free(mine.back()).ok()) ++failures;
          mine.pop_back();
        }
      }
      for (uint64_t off : mine) {
        if (!h.Free(off).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(h.stats().used_bytes, 0u);
  EXPECT_EQ(h.stats().free_blocks, 1u);
}

TEST(HeapAllocatorTest, ReserveHookBacksEveryBlockBeforeItIsHandedOut) {
  uint64_t reserved = 0;
  bool refuse = false;
  HeapAllocator h(1 << 20, "client heap", [&](uint64_t end) -> Status {
    if (refuse && end > reserved) return Unavailable("/dev/shm is full");
    reserved = std::max(reserved, end);
    return OkStatus();
  });
  const uint64_t a = *h.Allocate(1000);
  EXPECT_EQ(reserved, 1024u);
  const uint64_t b = *h.Allocate(4096);
  EXPECT_EQ(reserved, 1024u + 4096u);
  // Growth refused: the block is not handed out, the error says why and whose heap it is.
  refuse = true;
  auto c = h.Allocate(8192);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(c.status().message().find("/dev/shm is full"), std::string::npos);
  EXPECT_NE(c.status().message().find("client heap: allocating 8192 bytes"), std::string::npos)
      << c.status().message();
  EXPECT_EQ(h.stats().allocations, 2u);
  // Space below what is backed is still handed out without growing.
  ASSERT_TRUE(h.Free(a).ok());
  EXPECT_EQ(*h.Allocate(512), 0u);
  ASSERT_TRUE(h.Free(b).ok());
}

// A full /dev/shm is not a full heap: a waiter gives up after a short grace (in which a freed
// block could still serve it) naming /dev/shm, instead of waiting out its whole deadline.
TEST(HeapAllocatorTest, AllocateWaitingDoesNotWaitOutAFullDevShm) {
  HeapAllocator h(1 << 20, "client heap",
                  [](uint64_t) -> Status { return Unavailable("/dev/shm is full"); });
  const auto start = std::chrono::steady_clock::now();
  auto b = h.AllocateWaiting(4096, Deadline::After(std::chrono::hours(1)));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition) << b.status().ToString();
  EXPECT_NE(b.status().message().find("/dev/shm is full"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
}

TEST(HeapAllocatorTest, AllocateWaitingGetsTheSpaceAFreeGivesBack) {
  HeapAllocator h(4096, "client heap");
  const uint64_t a = *h.Allocate(4096);  // full
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(h.Free(a).ok());
  });
  auto b = h.AllocateWaiting(2048, Deadline::After(std::chrono::seconds(30)));
  completer.join();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, 0u);
}

TEST(HeapAllocatorTest, AllocateWaitingGivesUpNamingWhatHoldsTheHeap) {
  HeapAllocator h(4096, "client heap");
  ASSERT_TRUE(h.Allocate(3000).ok());
  auto b = h.AllocateWaiting(2048, Deadline::After(std::chrono::milliseconds(50)));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(b.status().message().find("client heap: cannot allocate 2048 bytes"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("1 blocks in use hold the rest"), std::string::npos);
  // A block larger than the whole heap can never fit: refused at once, not after the deadline.
  auto huge = h.AllocateWaiting(8192, Deadline::After(std::chrono::hours(1)));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("can never fit"), std::string::npos);
}

// A burst several times the heap from several submitting threads, while a completer frees blocks
// in submission order (as the sidecar's completions do): every allocation succeeds and no two
// live blocks overlap.
TEST(HeapAllocatorTest, BurstsLargerThanTheHeapFromSeveralThreadsAllSucceed) {
  constexpr uint64_t kHeap = 64 << 10;
  HeapAllocator h(kHeap, "client heap");
  std::mutex mu;
  std::condition_variable cv;
  std::deque<uint64_t> in_flight;
  std::map<uint64_t, uint64_t> live;  // offset -> bytes, checked for overlap
  uint64_t allocated_total = 0;
  int submitters_left = 4;
  std::atomic<int> failures{0};
  std::thread completer([&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return !in_flight.empty() || submitters_left == 0; });
      if (in_flight.empty()) return;
      const uint64_t off = in_flight.front();
      in_flight.pop_front();
      live.erase(off);
      if (!h.Free(off).ok()) ++failures;
    }
  });
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 400; ++i) {
        const uint64_t bytes = 1 + rng() % (kHeap / 3);
        auto off = h.AllocateWaiting(bytes, Deadline::After(std::chrono::seconds(60)));
        if (!off.ok()) {
          ++failures;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        auto next = live.lower_bound(*off);
        if (next != live.end() && next->first < *off + bytes) ++failures;
        if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > *off) {
          ++failures;
        }
        live.emplace(*off, bytes);
        allocated_total += bytes;
        in_flight.push_back(*off);
        cv.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu);
      --submitters_left;
      cv.notify_all();
    });
  }
  for (auto& t : submitters) t.join();
  completer.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(allocated_total, 20 * kHeap);
  EXPECT_EQ(h.stats().used_bytes, 0u);
}

}  // namespace
}  // namespace korovod::sidecar
