// WorkQueue: client-go's dedup, dirty re-queue, delays, rate limiting and shutdown.
#include "operator/kube/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace korovod::kube {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

SteadyClock::time_point In(milliseconds d) { return SteadyClock::now() + d; }

TEST(WorkQueueTest, AddDeduplicates) {
  WorkQueue q;
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.Get(In(milliseconds(10))), "a");
  EXPECT_EQ(q.Get(In(milliseconds(10))), "b");
  EXPECT_EQ(q.Get(In(milliseconds(10))), std::nullopt);
}

TEST(WorkQueueTest, ReAddWhileProcessingIsQueuedOnDone) {
  WorkQueue q;
  q.Add("a");
  auto key = q.Get(In(milliseconds(10)));
  ASSERT_EQ(key, "a");
  q.Add("a");  // changed while being reconciled
  q.Add("a");
  EXPECT_EQ(q.Len(), 0u);  // never handed to a second worker
  EXPECT_EQ(q.Get(In(milliseconds(10))), std::nullopt);
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(q.Get(In(milliseconds(10))), "a");
  q.Done("a");
  EXPECT_EQ(q.Get(In(milliseconds(10))), std::nullopt);
}

TEST(WorkQueueTest, AddAfterOrdersByDueTime) {
  WorkQueue q;
  const auto start = SteadyClock::now();
  q.AddAfter("late", milliseconds(60));
  q.AddAfter("early", milliseconds(20));
  q.AddAfter("late", milliseconds(500));  // the earlier time is kept
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.Get(In(milliseconds(2000))), "early");
  EXPECT_GE(SteadyClock::now() - start, milliseconds(20));
  EXPECT_EQ(q.Get(In(milliseconds(2000))), "late");
  const auto waited = SteadyClock::now() - start;
  EXPECT_GE(waited, milliseconds(60));
  EXPECT_LT(waited, milliseconds(400));
  q.AddAfter("now", milliseconds(0));
  EXPECT_EQ(q.Len(), 1u);
}

TEST(WorkQueueTest, RateLimitBackoffGrowsAndForgetResets) {
  WorkQueue q(WorkQueueOptions{milliseconds(10), milliseconds(40)});
  std::vector<milliseconds> delays;
  for (int i = 0; i < 4; ++i) {
    const auto start = SteadyClock::now();
    q.AddRateLimited("k");
    auto key = q.Get(In(milliseconds(2000)));
    ASSERT_EQ(key, "k");
    delays.push_back(std::chrono::duration_cast<milliseconds>(SteadyClock::now() - start));
    q.Done("k");
  }
  EXPECT_EQ(q.NumRequeues("k"), 4);
  EXPECT_GE(delays[0], milliseconds(10));
  EXPECT_GE(delays[1], milliseconds(20));
  EXPECT_GE(delays[2], milliseconds(40));
  EXPECT_GE(delays[3], milliseconds(40));  // capped
  EXPECT_LT(delays[3], milliseconds(200));
  q.Forget("k");
  EXPECT_EQ(q.NumRequeues("k"), 0);
  const auto start = SteadyClock::now();
  q.AddRateLimited("k");
  ASSERT_EQ(q.Get(In(milliseconds(2000))), "k");
  EXPECT_LT(SteadyClock::now() - start, milliseconds(35));
}

TEST(WorkQueueTest, GetHonoursItsDeadline) {
  WorkQueue q;
  const auto start = SteadyClock::now();
  EXPECT_EQ(q.Get(In(milliseconds(30))), std::nullopt);
  EXPECT_GE(SteadyClock::now() - start, milliseconds(30));
}

TEST(WorkQueueTest, ShutDownWakesEveryGetter) {
  WorkQueue q;
  std::atomic<int> woken{0};
  std::vector<std::thread> getters;
  for (int i = 0; i < 3; ++i) {
    getters.emplace_back([&] {
      if (!q.Get(In(milliseconds(10000)))) ++woken;
    });
  }
  std::this_thread::sleep_for(milliseconds(30));
  const auto start = SteadyClock::now();
  q.ShutDown();
  for (auto& t : getters) t.join();
  EXPECT_EQ(woken.load(), 3);
  EXPECT_LT(SteadyClock::now() - start, milliseconds(500));
  EXPECT_TRUE(q.shutting_down());
  q.Add("x");
  EXPECT_EQ(q.Len(), 0u);
}

// Four workers, five keys, and adds spread over the time the workers hold keys, so keys are
// re-added while in flight: no key is ever held by two workers at once, and none loses its last
// add (each key's final version, set before its last Add, is seen by a worker that took it).
TEST(WorkQueueTest, ManyWorkersNeverShareAKey) {
  constexpr int kKeys = 5;
  WorkQueue q;
  std::mutex mu;
  std::set<std::string> in_flight;
  std::map<std::string, int> version;  // bumped by the adder before each Add
  std::map<std::string, int> handled;  // the version a worker saw when it took the key
  std::atomic<bool> overlap{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get(In(milliseconds(5000)))) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!in_flight.insert(*key).second) overlap = true;
          handled[*key] = version[*key];
        }
        std::this_thread::sleep_for(milliseconds(1));
        {
          std::lock_guard<std::mutex> lock(mu);
          in_flight.erase(*key);
        }
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k" + std::to_string(i % kKeys);
    {
      std::lock_guard<std::mutex> lock(mu);
      version[key] = i;
    }
    q.Add(key);
    if (i % 10 == 9) std::this_thread::sleep_for(milliseconds(1));
  }
  const auto caught_up = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return handled == version;
  };
  const auto deadline = In(milliseconds(5000));
  while (!caught_up() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_FALSE(overlap.load());
  ASSERT_EQ(handled.size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(handled, version) << "a key re-added while in flight was not handed out again";
}

}  // namespace
}  // namespace korovod::kube
