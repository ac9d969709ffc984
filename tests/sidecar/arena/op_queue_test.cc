// The SPSC queues: order and no loss across processes, blocking and waking through the futex
// doorbells, deadlines, shutdown, and a peer that corrupts the indices.
#include "sidecar/arena/op_queue.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/sidecar/arena/protocol_test_util.h"

namespace korovod::sidecar {
namespace {

using std::chrono::milliseconds;
using testing::SmallSizes;
using testing::UniqueArenaName;
using testing::WaitChild;

// Blocks in the kernel at once: exercises the doorbell path rather than spinning.
WaitPolicy SleepAtOnce() {
  WaitPolicy p;
  p.spin = std::chrono::nanoseconds(0);
  p.yield_window = std::chrono::microseconds(0);
  return p;
}

SubmissionRecord Numbered(uint64_t i) {
  SubmissionRecord r{};
  r.op_id = i;
  r.kind = RecordKind::kOp;
  r.dims[0] = static_cast<int64_t>(i * 3);
  r.splits[kMaxInlineSplits - 1] = ~static_cast<int64_t>(i);  // the record's last bytes
  return r;
}

bool IsNumbered(const SubmissionRecord& r, uint64_t i) {
  return r.op_id == i && r.dims[0] == static_cast<int64_t>(i * 3) &&
         r.splits[kMaxInlineSplits - 1] == ~static_cast<int64_t>(i);
}

struct Pair {
  std::unique_ptr<Arena> sidecar;
  std::unique_ptr<Arena> client;
};

Pair MakePair(const std::string& tag, uint32_t slots = 8) {
  Pair p;
  const std::string name = UniqueArenaName(tag);
  auto s = Arena::Create(name, SmallSizes(slots));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  p.sidecar = std::move(*s);
  auto c = Arena::Open(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  p.client = std::move(*c);
  return p;
}

// Waits until the consumer (or producer) of `q` announced that it sleeps.
void WaitUntilAsleep(const SharedWord& waiting) {
  for (int i = 0; i < 10000 && waiting.value.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_NE(waiting.value.load(), 0u) << "the waiter never went to sleep";
}

TEST(OpQueueTest, FillsToCapacityAndPopsInOrder) {
  Pair p = MakePair("fill");
  SubmissionQueue producer(*p.client);
  SubmissionQueue consumer(*p.sidecar);
  SubmissionRecord out{};
  EXPECT_FALSE(consumer.TryPop(&out));
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(producer.TryPush(Numbered(i)));
  EXPECT_FALSE(producer.TryPush(Numbered(99)));
  EXPECT_TRUE(producer.status().ok());  // full is not an error
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(consumer.TryPop(&out));
    EXPECT_TRUE(IsNumbered(out, i));
  }
  EXPECT_FALSE(consumer.TryPop(&out));
  EXPECT_TRUE(consumer.status().ok());
}

TEST(OpQueueTest, IndicesWrapAround32Bits) {
  Pair p = MakePair("wrap", 4);
  for (QueueControl* q : {&p.sidecar->header().submission, &p.sidecar->header().completion}) {
    q->head.value.store(0xfffffff0u);
    q->tail.value.store(0xfffffff0u);
  }
  CompletionQueue producer(*p.sidecar);
  CompletionQueue consumer(*p.client);
  for (uint64_t i = 0; i < 100; ++i) {
    CompletionRecord c{};
    c.op_id = i;
    ASSERT_TRUE(producer.TryPush(c));
    if (i % 3 == 0) {
      ASSERT_TRUE(producer.TryPush(c));
    }
    CompletionRecord out{};
    ASSERT_TRUE(consumer.TryPop(&out));
    EXPECT_EQ(out.op_id, i);
    if (i % 3 == 0) {
      ASSERT_TRUE(consumer.TryPop(&out));
    }
  }
  EXPECT_LT(p.sidecar->header().completion.head.value.load(), 0x1000u);  // it wrapped
}

// The child is the trainer: one thread submits N records, another reads N completions. The parent
// is the sidecar: it pops each submission and answers it. Small queues, so both sides fill up
// and block many times.
void RunForkedStream(uint64_t n, WaitPolicy policy) {
  const std::string name = UniqueArenaName("stream");
  auto created = Arena::Create(name, SmallSizes(64));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Arena& sidecar = **created;

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int> code{0};
    {
      auto opened = Arena::Open(name);
      if (!opened.ok()) ::_exit(10);
      SubmissionQueue submit(**opened, policy);
      CompletionQueue complete(**opened, policy);
      std::thread reader([&] {
        for (uint64_t i = 0; i < n; ++i) {
          CompletionRecord c{};
          if (!complete.Pop(&c, Deadline::After(milliseconds(60000))).ok()) {
            code = 11;
            return;
          }
          if (c.op_id != i || c.dims[0] != static_cast<int64_t>(i * 3) ||
              c.received_splits[kMaxInlineSplits - 1] != static_cast<int64_t>(i)) {
            code = 12;
            return;
          }
        }
      });
      for (uint64_t i = 0; i < n; ++i) {
        if (!submit.Push(Numbered(i), Deadline::After(milliseconds(60000))).ok()) {
          code = 13;
          break;
        }
      }
      reader.join();
    }
    ::_exit(code.load());
  }

  SubmissionQueue submissions(sidecar, policy);
  CompletionQueue completions(sidecar, policy);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    SubmissionRecord r{};
    Status s = submissions.Pop(&r, Deadline::After(milliseconds(60000)));
    ASSERT_TRUE(s.ok()) << "record " << i << ": " << s.ToString();
    if (!IsNumbered(r, i)) ++bad;
    CompletionRecord c{};
    c.op_id = r.op_id;
    c.dims[0] = r.dims[0];
    c.received_splits[kMaxInlineSplits - 1] = ~r.splits[kMaxInlineSplits - 1];
    s = completions.Push(c, Deadline::After(milliseconds(60000)));
    ASSERT_TRUE(s.ok()) << "completion " << i << ": " << s.ToString();
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(WaitChild(pid), 0);
  // Nothing extra arrived, and the child's detach closed the queue.
  SubmissionRecord extra{};
  Status last = submissions.Pop(&extra, Deadline::After(milliseconds(1000)));
  EXPECT_EQ(last.code(), StatusCode::kAborted) << last.ToString();
}

TEST(OpQueueTest, MillionRecordsAcrossForkInOrder) {
  RunForkedStream(1000000,
                  WaitPolicy::For(2, static_cast<int>(std::thread::hardware_concurrency())));
}

TEST(OpQueueTest, RecordsAcrossForkAlwaysSleeping) { RunForkedStream(100000, SleepAtOnce()); }

TEST(OpQueueTest, RecordsAcrossForkOversubscribed) {
  RunForkedStream(200000, WaitPolicy::For(4, 1));  // no spinning, yield then sleep
}

TEST(OpQueueTest, BlockedPopWakesOnPush) {
  Pair p = MakePair("wake");
  SubmissionQueue consumer(*p.sidecar, SleepAtOnce());
  SubmissionQueue producer(*p.client);
  Status popped;
  SubmissionRecord out{};
  Clock::time_point returned;
  std::thread t([&] {
    popped = consumer.Pop(&out, Deadline::After(milliseconds(20000)));
    returned = Clock::now();
  });
  WaitUntilAsleep(p.sidecar->header().submission.consumer_waiting);
  const Clock::time_point pushed = Clock::now();
  ASSERT_TRUE(producer.TryPush(Numbered(7)));
  t.join();
  ASSERT_TRUE(popped.ok()) << popped.ToString();
  EXPECT_TRUE(IsNumbered(out, 7));
  // Woken by the doorbell, not by the 100 ms re-check.
  EXPECT_LT(returned - pushed, milliseconds(80));
}

TEST(OpQueueTest, BlockedPushWakesOnPop) {
  Pair p = MakePair("wakepush", 2);
  CompletionQueue producer(*p.sidecar, SleepAtOnce());
  CompletionQueue consumer(*p.client);
  CompletionRecord c{};
  ASSERT_TRUE(producer.TryPush(c));
  ASSERT_TRUE(producer.TryPush(c));
  Status pushed;
  std::thread t([&] {
    c.op_id = 3;
    pushed = producer.Push(c, Deadline::After(milliseconds(20000)));
  });
  WaitUntilAsleep(p.sidecar->header().completion.producer_waiting);
  CompletionRecord out{};
  ASSERT_TRUE(consumer.TryPop(&out));
  t.join();
  ASSERT_TRUE(pushed.ok()) << pushed.ToString();
  ASSERT_TRUE(consumer.TryPop(&out));
  ASSERT_TRUE(consumer.TryPop(&out));
  EXPECT_EQ(out.op_id, 3u);
}

TEST(OpQueueTest, PopDeadlineExpires) {
  Pair p = MakePair("deadline");
  SubmissionQueue consumer(*p.sidecar);
  SubmissionRecord out{};
  const Clock::time_point start = Clock::now();
  Status s = consumer.Pop(&out, Deadline::After(milliseconds(60)));
  const auto took = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("submission queue of arena " + p.sidecar->name()), std::string::npos)
      << s.message();
  EXPECT_GE(took, milliseconds(60));
  EXPECT_LT(took, milliseconds(2000));
  // An already expired deadline still takes a ready record.
  SubmissionQueue producer(*p.client);
  ASSERT_TRUE(producer.TryPush(Numbered(1)));
  EXPECT_TRUE(consumer.Pop(&out, Deadline::After(milliseconds(0))).ok());
}

TEST(OpQueueTest, PushDeadlineExpiresWhenFull) {
  Pair p = MakePair("pushdeadline", 2);
  SubmissionQueue producer(*p.client, SleepAtOnce());
  ASSERT_TRUE(producer.TryPush(Numbered(0)));
  ASSERT_TRUE(producer.TryPush(Numbered(1)));
  const Clock::time_point start = Clock::now();
  Status s = producer.Push(Numbered(2), Deadline::After(milliseconds(50)));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("free slot"), std::string::npos);
  EXPECT_GE(Clock::now() - start, milliseconds(50));
}

TEST(OpQueueTest, CloseWakesABlockedConsumer) {
  Pair p = MakePair("close");
  SubmissionQueue consumer(*p.sidecar, SleepAtOnce());
  Status popped;
  Clock::time_point returned;
  std::thread t([&] {
    SubmissionRecord out{};
    popped = consumer.Pop(&out, Deadline::Infinite());
    returned = Clock::now();
  });
  WaitUntilAsleep(p.sidecar->header().submission.consumer_waiting);
  const Clock::time_point closed = Clock::now();
  consumer.Close();  // e.g. the sidecar's shutdown path, from another thread
  t.join();
  EXPECT_EQ(popped.code(), StatusCode::kAborted);
  EXPECT_NE(popped.message().find("closed"), std::string::npos);
  EXPECT_LT(returned - closed, milliseconds(80));
}

TEST(OpQueueTest, ClientDetachWakesTheSidecar) {
  Pair p = MakePair("detach");
  SubmissionQueue consumer(*p.sidecar, SleepAtOnce());
  Status popped;
  std::thread t([&] {
    SubmissionRecord out{};
    popped = consumer.Pop(&out, Deadline::After(milliseconds(20000)));
  });
  WaitUntilAsleep(p.sidecar->header().submission.consumer_waiting);
  p.client.reset();
  t.join();
  EXPECT_EQ(popped.code(), StatusCode::kAborted);
}

TEST(OpQueueTest, ClosedQueueDrainsThenAborts) {
  Pair p = MakePair("drain");
  SubmissionQueue producer(*p.client);
  SubmissionQueue consumer(*p.sidecar);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(producer.TryPush(Numbered(i)));
  producer.Close();
  EXPECT_TRUE(consumer.closed());
  EXPECT_FALSE(producer.TryPush(Numbered(3)));
  EXPECT_EQ(producer.Push(Numbered(3), Deadline::Infinite()).code(), StatusCode::kAborted);
  SubmissionRecord out{};
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(consumer.Pop(&out, Deadline::Infinite()).ok());
    EXPECT_TRUE(IsNumbered(out, i));
  }
  EXPECT_EQ(consumer.Pop(&out, Deadline::Infinite()).code(), StatusCode::kAborted);
}

TEST(OpQueueTest, CorruptHeadFromThePeerIsDetected) {
  Pair p = MakePair("corrupthead");
  SubmissionQueue consumer(*p.sidecar);
  p.client->header().submission.head.value.store(1000);  // 1000 records in an 8-slot ring
  SubmissionRecord out{};
  EXPECT_FALSE(consumer.TryPop(&out));
  EXPECT_EQ(consumer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(consumer.status().message().find("impossible head (head 1000, tail 0, capacity 8)"),
            std::string::npos)
      << consumer.status().message();
  Status s = consumer.Pop(&out, Deadline::Infinite());  // returns, does not hang
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
}

TEST(OpQueueTest, CorruptTailFromThePeerIsDetected) {
  Pair p = MakePair("corrupttail", 2);
  CompletionQueue producer(*p.sidecar);
  CompletionRecord c{};
  ASSERT_TRUE(producer.TryPush(c));
  ASSERT_TRUE(producer.TryPush(c));
  p.client->header().completion.tail.value.store(77);  // beyond head
  EXPECT_FALSE(producer.TryPush(c));
  EXPECT_EQ(producer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(producer.Push(c, Deadline::Infinite()).code(), StatusCode::kFailedPrecondition);
}

TEST(OpQueueTest, PeerTamperingWithOurIndexDoesNotMoveUs) {
  Pair p = MakePair("tamper");
  SubmissionQueue producer(*p.client);
  SubmissionQueue consumer(*p.sidecar);
  ASSERT_TRUE(producer.TryPush(Numbered(0)));
  ASSERT_TRUE(producer.TryPush(Numbered(1)));
  SubmissionRecord out{};
  ASSERT_TRUE(consumer.TryPop(&out));
  p.client->header().submission.tail.value.store(0);  // the client rewinds the sidecar's tail
  ASSERT_TRUE(consumer.TryPop(&out));
  EXPECT_TRUE(IsNumbered(out, 1));  // the consumer keeps its own count
  EXPECT_FALSE(consumer.TryPop(&out));
}

}  // namespace
}  // namespace korovod::sidecar
