// The elastic membership server at scale and under a failing-over driver: fencing (a worker that
// met a newer leader's server refuses a deposed one's, and finds the current one), registrations
// held until the driver lists the worker, long-poll queries, the bounded update log, and one
// listener serving several jobs.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "runtime/transport/socket.h"
#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/membership_listener.h"

namespace korovod {
namespace {

using std::chrono::milliseconds;

constexpr char kKey[] = "elastic-membership-test-key";

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::unique_ptr<ElasticRendezvousServer> Serve(uint64_t token, milliseconds timeout,
                                               uint16_t port = 0,
                                               std::shared_ptr<MembershipListener> l = nullptr,
                                               const std::string& key = kKey) {
  ElasticServerOptions o;
  o.job_key = key;
  o.min_workers = 1;
  o.timeout = timeout;
  o.fencing_token = token;
  o.port = port;
  o.listener = std::move(l);
  auto s = ElasticRendezvousServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

ElasticJoinOptions Join(uint16_t port, const std::string& worker, uint32_t last_epoch,
                        uint64_t min_token = 0, const std::string& key = kKey) {
  ElasticJoinOptions o;
  o.server = {"127.0.0.1", port};
  o.job_key = key;
  o.worker = worker;
  o.last_epoch = last_epoch;
  o.self.host_name = worker;
  o.self.node = "node-a";
  o.self.port = 30000;
  o.self.addresses = {{"lo", "127.0.0.1"}};
  o.timeout = milliseconds(20000);
  o.min_token = min_token;
  return o;
}

// Two servers for one job, as a deposed leader (token 1) and the new one (token 2) would run:
// a member that met token 2 refuses the other, naming both tokens, for registrations and queries,
// and the deposed server places nobody.
TEST(ElasticFencing, AMemberThatMetTheNewLeaderRefusesTheDeposedOne) {
  auto deposed = Serve(1, milliseconds(20000));
  auto current = Serve(2, milliseconds(20000));
  deposed->SetLiveWorkers({"a"});
  current->SetLiveWorkers({"a"});
  auto joined = JoinElasticEpoch(Join(current->port(), "a", 0));
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->token, 2u);

  MembershipQuery q;
  q.since = joined->version;
  q.min_token = joined->token;
  auto fenced =
      QueryMembership({"127.0.0.1", deposed->port()}, kKey, q, Deadline::After(milliseconds(5000)));
  ASSERT_FALSE(fenced.ok());
  EXPECT_TRUE(
      Contains(fenced.status().message(), "answers with fencing token 1, below the token 2"))
      << fenced.status().ToString();
  auto ok =
      QueryMembership({"127.0.0.1", current->port()}, kKey, q, Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->token, 2u);

  ElasticJoinOptions again = Join(deposed->port(), "a", 1, /*min_token=*/2);
  again.timeout = milliseconds(4000);
  auto refused = JoinElasticEpoch(again);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(refused.status().message(), "fencing token 1, below the token 2"))
      << refused.status().ToString();
  EXPECT_EQ(deposed->epoch(), 0u);  // it formed nothing

  // A worker that never met a token takes either (nothing tells it which is current).
  auto fresh =
      QueryMembership({"127.0.0.1", deposed->port()}, kKey, 0, Deadline::After(milliseconds(5000)));
  EXPECT_TRUE(fresh.ok()) << fresh.status().ToString();
}

// Refused, the worker keeps looking under the same name until its deadline: once the deposed
// server is gone and the new leader serves on that address, it joins there.
TEST(ElasticFencing, AFencedWorkerFindsTheCurrentServer) {
  auto deposed = Serve(1, milliseconds(20000));
  deposed->SetLiveWorkers({"a"});
  const uint16_t port = deposed->port();
  auto join = std::async(std::launch::async,
                         [port] { return JoinElasticEpoch(Join(port, "a", 0, /*min_token=*/2)); });
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(deposed->epoch(), 0u);
  deposed.reset();
  auto current = Serve(2, milliseconds(20000), port);
  ASSERT_NE(current, nullptr);
  current->SetLiveWorkers({"a"});
  auto joined = join.get();
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->token, 2u);
  EXPECT_EQ(joined->epoch, 1u);
}

// A worker whose pod the driver has not seen running yet is held, registered, not refused: once
// listed it forms the epoch with the others.
TEST(ElasticRegistration, AWorkerNotYetListedIsHeldUntilListed) {
  auto server = Serve(0, milliseconds(20000));
  server->SetLiveWorkers({"a"});
  std::atomic<bool> b_done{false};
  auto b = std::async(std::launch::async, [&] {
    auto r = JoinElasticEpoch(Join(server->port(), "b", 0));
    b_done = true;
    return r;
  });
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_FALSE(b_done.load()) << "an unlisted worker was answered before the driver listed it";
  server->SetLiveWorkers({"a", "b"});
  auto a = JoinElasticEpoch(Join(server->port(), "a", 0));
  auto rb = b.get();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(rb->epoch, 1u);
  EXPECT_EQ(rb->size, 2);
  EXPECT_EQ(rb->rank, 0);  // registered first
  EXPECT_EQ(a->rank, 1);
}

TEST(ElasticRegistration, AWorkerNeverListedIsRefusedAtTheTimeoutNamingIt) {
  auto server = Serve(0, milliseconds(600));
  server->SetLiveWorkers({"a"});
  auto r = JoinElasticEpoch(Join(server->port(), "ghost", 0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(r.status().message(), "worker ghost is not a live worker of this job"))
      << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "did not list it within the elastic timeout (0.6 s"))
      << r.status().ToString();
}

// A query may wait for the version to move past the one its member saw: answered when the driver
// changes the live set, with what changed; without a change, at its bound with the same version.
TEST(ElasticQuery, ALongPollIsAnsweredWhenTheMembershipMoves) {
  auto server = Serve(0, milliseconds(20000));
  server->SetLiveWorkers({"a"});
  auto joined = JoinElasticEpoch(Join(server->port(), "a", 0));
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  MembershipQuery q;
  q.since = joined->version;
  q.seen = joined->version;
  q.wait = milliseconds(20000);
  std::atomic<bool> done{false};
  auto held = std::async(std::launch::async, [&] {
    auto v = QueryMembership({"127.0.0.1", server->port()}, kKey, q,
                             Deadline::After(milliseconds(25000)));
    done = true;
    return v;
  });
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_FALSE(done.load()) << "the query was answered though nothing moved";
  server->SetLiveWorkers({"a", "b"});
  auto v = held.get();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->version, joined->version + 1);
  EXPECT_EQ(v->update, kHostsAdded);

  MembershipQuery bounded = q;
  bounded.seen = v->version;
  bounded.wait = milliseconds(300);
  auto same = QueryMembership({"127.0.0.1", server->port()}, kKey, bounded,
                              Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->version, v->version);

  // A stop request ends a held query at once.
  std::stop_source stop;
  MembershipQuery stopped = bounded;
  stopped.wait = milliseconds(20000);
  stopped.stop = stop.get_token();
  auto cut = std::async(std::launch::async, [&] {
    return QueryMembership({"127.0.0.1", server->port()}, kKey, stopped,
                           Deadline::After(milliseconds(25000)));
  });
  std::this_thread::sleep_for(milliseconds(200));
  stop.request_stop();
  EXPECT_EQ(cut.get().status().code(), StatusCode::kAborted);
}

// Churn without a new epoch keeps the update log bounded; an old `since` reads every bit that
// may have changed, a recent one exactly what did.
TEST(ElasticQuery, TheUpdateLogIsTrimmedWithoutHidingAChange) {
  auto server = Serve(0, milliseconds(20000));
  server->SetLiveWorkers({"a"});
  auto joined = JoinElasticEpoch(Join(server->port(), "a", 0));
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  for (int i = 0; i < 3 * static_cast<int>(kMaxUpdateLog); ++i) {
    server->SetLiveWorkers(i % 2 == 0 ? std::vector<std::string>{"a", "b"}
                                      : std::vector<std::string>{"a"});
  }
  EXPECT_LE(server->update_log_size(), kMaxUpdateLog);
  auto old = QueryMembership({"127.0.0.1", server->port()}, kKey, joined->version,
                             Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->update, kHostsAdded | kHostsRemoved);
  const uint64_t now = old->version;
  server->SetLiveWorkers({"a", "c"});
  auto recent = QueryMembership({"127.0.0.1", server->port()}, kKey, now,
                                Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->update, kHostsAdded);
  EXPECT_EQ(recent->version, now + 1);
  // A new epoch: its members ask from its version, the log before it is one entry at most.
  server->SetLiveWorkers({"a"});
  auto next = JoinElasticEpoch(Join(server->port(), "a", 1));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_LE(server->update_log_size(), 1u);
  auto none = QueryMembership({"127.0.0.1", server->port()}, kKey, next->version,
                              Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->update, kNoHostUpdate);
}

// One listener, several jobs: each connection reaches its own job's server by its key.
TEST(MembershipListener, OneListenerServesEveryJob) {
  auto listener = MembershipListener::Start({});
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  auto one = Serve(0, milliseconds(20000), 0, *listener, "key-of-job-one");
  auto two = Serve(0, milliseconds(20000), 0, *listener, "key-of-job-two");
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(one->port(), two->port());
  EXPECT_EQ((*listener)->jobs(), 2u);
  one->SetLiveWorkers({"a"});
  two->SetLiveWorkers({"x", "y"});
  auto x = std::async(std::launch::async, [&] {
    return JoinElasticEpoch(Join(two->port(), "x", 0, 0, "key-of-job-two"));
  });
  auto a = JoinElasticEpoch(Join(one->port(), "a", 0, 0, "key-of-job-one"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size, 1);
  auto y = JoinElasticEpoch(Join(two->port(), "y", 0, 0, "key-of-job-two"));
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_TRUE(x.get().ok());
  EXPECT_EQ(y->size, 2);
  EXPECT_EQ(one->members(), std::vector<std::string>{"a"});
  // A second server for a job already served there is refused.
  ElasticServerOptions dup;
  dup.job_key = "key-of-job-one";
  dup.listener = *listener;
  auto refused = ElasticRendezvousServer::Start(dup);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.status().message(), "already serves a job with this job key"));
  auto still = QueryMembership({"127.0.0.1", one->port()}, "key-of-job-one", 0,
                               Deadline::After(milliseconds(5000)));
  EXPECT_TRUE(still.ok()) << "the refused twin took the served job with it: "
                          << still.status().ToString();
  // A stopped job's workers are told it is not served here (they look elsewhere).
  one.reset();
  EXPECT_EQ((*listener)->jobs(), 1u);
  auto gone = QueryMembership({"127.0.0.1", two->port()}, "key-of-job-one", 0,
                              Deadline::After(milliseconds(5000)));
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(Contains(gone.status().message(), "serves no job")) << gone.status().ToString();
}

}  // namespace
}  // namespace korovod
