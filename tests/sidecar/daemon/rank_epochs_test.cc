// RankEpochs' membership answers in an elastic job: a commit's question is answered from the
// membership watch (or, the epoch's first, by the server itself), and a server that does not
// answer (an operator failing over) reads as "no change" instead of failing the trainer's commit.
#include "sidecar/daemon/rank_epochs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace korovod::sidecar {
namespace {

using std::chrono::milliseconds;

struct FakeServer {
  std::atomic<bool> up{true};
  std::atomic<int> queries{0};
  std::atomic<uint64_t> version{10};
};

RankEpochs Elastic(FakeServer& server, milliseconds watch_every) {
  return RankEpochs(
      [](uint32_t, Deadline) -> StatusOr<std::shared_ptr<ServedEpoch>> {
        auto e = std::make_shared<ServedEpoch>();  // no engine: nothing to serve here
        e->epoch = 3;
        e->formed_version = 10;
        return e;
      },
      [&server](const MembershipQuery& q, Deadline) -> StatusOr<MembershipVersion> {
        const uint64_t since = q.since;
        ++server.queries;
        if (!server.up) return Unavailable("the membership server is away");
        MembershipVersion v;
        v.epoch = 3;
        v.version = server.version;
        v.update = server.version > since ? kHostsAdded : kNoHostUpdate;
        return v;
      },
      watch_every, /*long_poll=*/milliseconds(0));
}

TEST(RankEpochsMembership, TheEpochsFirstQuestionAsksThenTheAnswerIsReused) {
  FakeServer server;
  RankEpochs epochs = Elastic(server, milliseconds(3600 * 1000));  // no watch answer
  ASSERT_TRUE(epochs.ForSession(Deadline::After(milliseconds(1000))).ok());
  auto m = epochs.QueryMembership(Deadline::After(milliseconds(1000)));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->epoch, 3u);
  EXPECT_EQ(m->formed_version, 10u);
  EXPECT_EQ(m->version, 10u);
  EXPECT_EQ(m->update, kNoHostUpdate);
  EXPECT_EQ(server.queries.load(), 1);
  // The next commits within the answer's life cost no round trip.
  ASSERT_TRUE(epochs.QueryMembership(Deadline::After(milliseconds(1000))).ok());
  EXPECT_EQ(server.queries.load(), 1);
}

TEST(RankEpochsMembership, WatchAnswersCommitsAndAnAbsentServerReadsAsNoChange) {
  FakeServer server;
  RankEpochs epochs = Elastic(server, milliseconds(50));
  ASSERT_TRUE(epochs.ForSession(Deadline::After(milliseconds(1000))).ok());
  server.version = 11;  // a host was added
  while (server.queries.load() < 3) std::this_thread::sleep_for(milliseconds(20));
  auto m = epochs.QueryMembership(Deadline::After(milliseconds(1000)));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->version, 11u);
  EXPECT_EQ(m->update, kHostsAdded);

  // The server goes away: once the watch's last answer is stale, commits read "no change" (and
  // do not fail: training goes on until the server is back).
  server.up = false;
  Status last;
  RankEpochs::Membership seen;
  for (int i = 0; i < 200; ++i) {
    auto q = epochs.QueryMembership(Deadline::After(milliseconds(1000)));
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    seen = *q;
    if (seen.version == 10u) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(seen.version, 10u);
  EXPECT_EQ(seen.update, kNoHostUpdate);

  // Back: the next watch answer counts again.
  server.up = true;
  for (int i = 0; i < 200 && seen.version != 11u; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    seen = *epochs.QueryMembership(Deadline::After(milliseconds(1000)));
  }
  EXPECT_EQ(seen.version, 11u);
}

}  // namespace
}  // namespace korovod::sidecar
