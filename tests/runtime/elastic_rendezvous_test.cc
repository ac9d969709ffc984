// The elastic rendezvous on loopback: workers as threads register with the server and receive
// their epochs. Survivors keep their order (rank 0 stays rank 0), newcomers follow; the membership
// version tells members that workers came or went; below the minimum, a silent worker, a stale or
// unknown worker, the reset limit and a wrong job key each end in the error that names them.
#include "runtime/world/elastic_rendezvous.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "runtime/transport/socket.h"

namespace korovod {
namespace {

using std::chrono::milliseconds;

constexpr char kKey[] = "elastic-test-key";

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::unique_ptr<ElasticRendezvousServer> Serve(int min, milliseconds timeout, int reset_limit = -1,
                                               int max = 0) {
  ElasticServerOptions o;
  o.job_key = kKey;
  o.min_workers = min;
  o.max_workers = max;
  o.reset_limit = reset_limit;
  o.timeout = timeout;
  auto s = ElasticRendezvousServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

ElasticJoinOptions JoinOptions(const ElasticRendezvousServer& s, const std::string& worker,
                               uint32_t last_epoch, int port) {
  ElasticJoinOptions o;
  o.server = {"127.0.0.1", s.port()};
  o.job_key = kKey;
  o.worker = worker;
  o.last_epoch = last_epoch;
  o.self.host_name = worker;
  o.self.node = "node-a";
  o.self.port = static_cast<uint16_t>(port);
  o.self.addresses = {{"lo", "127.0.0.1"}};
  o.timeout = milliseconds(20000);
  return o;
}

// Joins every (worker, last epoch) at once, each from its own thread, in the listed order (each
// registration is in before the next starts, so "registration order" is the listed one).
std::map<std::string, StatusOr<ElasticAssignment>> JoinAll(
    const ElasticRendezvousServer& s, const std::vector<std::pair<std::string, uint32_t>>& who) {
  std::map<std::string, StatusOr<ElasticAssignment>> out;
  for (const auto& [w, e] : who) out.emplace(w, Internal("not run"));
  {
    std::vector<std::jthread> threads;
    int port = 30000;
    for (const auto& [w, e] : who) {
      threads.emplace_back(
          [&, w = w, e = e, port] { out.at(w) = JoinElasticEpoch(JoinOptions(s, w, e, port)); });
      ++port;
      std::this_thread::sleep_for(milliseconds(150));
    }
  }
  return out;
}

TEST(ElasticRendezvous, EpochsKeepSurvivorsInOrderAndAppendNewcomers) {
  auto server = Serve(2, milliseconds(20000));
  server->SetLiveWorkers({"a", "b", "c"});
  auto first = JoinAll(*server, {{"c", 0}, {"a", 0}, {"b", 0}});
  for (const auto& [w, a] : first) ASSERT_TRUE(a.ok()) << w << ": " << a.status().ToString();
  EXPECT_EQ(first.at("c")->rank, 0);  // newcomers in registration order
  EXPECT_EQ(first.at("a")->rank, 1);
  EXPECT_EQ(first.at("b")->rank, 2);
  for (const auto& [w, a] : first) {
    EXPECT_EQ(a->epoch, 1u);
    EXPECT_EQ(a->size, 3);
    ASSERT_EQ(a->table.size(), 3u);
    EXPECT_EQ(a->table[static_cast<size_t>(a->rank)].host_name, w);
  }
  EXPECT_EQ(server->members(), (std::vector<std::string>{"c", "a", "b"}));

  // "a" dies: the survivors re-register (b first), keep their relative order: c stays rank 0.
  const uint64_t formed_at = first.at("c")->version;
  server->SetLiveWorkers({"b", "c"});
  auto moved = QueryMembership({"127.0.0.1", server->port()}, kKey, formed_at,
                               Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_GT(moved->version, formed_at);
  EXPECT_EQ(moved->update, kHostsRemoved);
  // The member the driver removed is named, so survivors end an epoch it can no longer serve.
  EXPECT_EQ(moved->gone, (std::vector<std::string>{"a"}));
  auto second = JoinAll(*server, {{"b", 1}, {"c", 1}});
  ASSERT_TRUE(second.at("b").ok()) << second.at("b").status().ToString();
  ASSERT_TRUE(second.at("c").ok()) << second.at("c").status().ToString();
  EXPECT_EQ(second.at("c")->rank, 0);
  EXPECT_EQ(second.at("b")->rank, 1);
  EXPECT_EQ(second.at("b")->epoch, 2u);
  EXPECT_EQ(second.at("b")->size, 2);

  // A newcomer: the members learn it from the version, then all three form epoch 3.
  server->SetLiveWorkers({"b", "c", "d"});
  auto added = QueryMembership({"127.0.0.1", server->port()}, kKey, second.at("b")->version,
                               Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->update, kHostsAdded);
  EXPECT_EQ(added->epoch, 2u);
  EXPECT_TRUE(added->gone.empty());  // a newcomer ends nothing
  auto third = JoinAll(*server, {{"d", 0}, {"b", 2}, {"c", 2}});
  for (const auto& [w, a] : third) ASSERT_TRUE(a.ok()) << w << ": " << a.status().ToString();
  EXPECT_EQ(third.at("c")->rank, 0);
  EXPECT_EQ(third.at("b")->rank, 1);
  EXPECT_EQ(third.at("d")->rank, 2);
  EXPECT_EQ(third.at("d")->epoch, 3u);
  EXPECT_EQ(server->resets(), 2);
  auto none = QueryMembership({"127.0.0.1", server->port()}, kKey, third.at("d")->version,
                              Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->update, kNoHostUpdate);
}

TEST(ElasticRendezvous, BelowTheMinimumWaitsThenFailsNamingTheCounts) {
  auto server = Serve(3, milliseconds(600));
  server->SetLiveWorkers({"a", "b"});
  auto out = JoinAll(*server, {{"a", 0}, {"b", 0}});
  for (const auto& [w, a] : out) {
    ASSERT_FALSE(a.ok()) << w;
    EXPECT_EQ(a.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(a.status().message(), "2 workers alive, at least 3 needed"))
        << a.status().ToString();
  }
  EXPECT_FALSE(server->failure().ok());
  EXPECT_EQ(server->epoch(), 0u);
}

TEST(ElasticRendezvous, AWorkerThatNeverRegistersIsLeftOutAfterTheTimeout) {
  auto server = Serve(2, milliseconds(800));
  server->SetLiveWorkers({"a", "b", "silent"});
  auto out = JoinAll(*server, {{"a", 0}, {"b", 0}});
  ASSERT_TRUE(out.at("a").ok()) << out.at("a").status().ToString();
  ASSERT_TRUE(out.at("b").ok());
  EXPECT_EQ(out.at("a")->size, 2);
  EXPECT_EQ(server->TakeLost(), std::vector<std::string>{"silent"});
  EXPECT_TRUE(server->TakeLost().empty());
}

TEST(ElasticRendezvous, StaleAndUnknownWorkersAreRefused) {
  auto server = Serve(1, milliseconds(20000));
  server->SetLiveWorkers({"a"});
  auto first = JoinAll(*server, {{"a", 0}});
  ASSERT_TRUE(first.at("a").ok());
  // "a" formed epoch 1 and registers from it: epoch 2. Registering from 1 again is stale.
  auto second = JoinAll(*server, {{"a", 1}});
  ASSERT_TRUE(second.at("a").ok()) << second.at("a").status().ToString();
  auto stale = JoinElasticEpoch(JoinOptions(*server, "a", 1, 30100));
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(
      Contains(stale.status().message(), "registers from epoch 1 but the job is at epoch 2"))
      << stale.status().ToString();
  EXPECT_TRUE(Contains(stale.status().message(), "stale member is refused"));
  auto future = JoinElasticEpoch(JoinOptions(*server, "a", 9, 30100));
  ASSERT_FALSE(future.ok());
  EXPECT_TRUE(Contains(future.status().message(), "registers from epoch 9"));
  // A worker the driver listed and then removed is refused at once.
  server->SetLiveWorkers({"a", "ghost"});
  server->SetLiveWorkers({"a"});
  auto removed = JoinElasticEpoch(JoinOptions(*server, "ghost", 0, 30101));
  ASSERT_FALSE(removed.ok());
  EXPECT_TRUE(Contains(removed.status().message(), "worker ghost is not a live worker of this job"))
      << removed.status().ToString();
  EXPECT_TRUE(Contains(removed.status().message(), "the driver removed it"));
  // The server still serves the live worker.
  auto again = JoinAll(*server, {{"a", 2}});
  ASSERT_TRUE(again.at("a").ok()) << again.at("a").status().ToString();
  EXPECT_EQ(again.at("a")->epoch, 3u);
}

// A member whose sidecar restarted in place registers from epoch 0 (it lost its epoch): it joins
// the next epoch with the survivors and keeps its rank.
TEST(ElasticRendezvous, AMemberWhoseSidecarRestartedJoinsTheNextEpoch) {
  auto server = Serve(2, milliseconds(20000));
  server->SetLiveWorkers({"a", "b"});
  auto first = JoinAll(*server, {{"a", 0}, {"b", 0}});
  ASSERT_TRUE(first.at("a").ok() && first.at("b").ok());
  const int b_rank = first.at("b")->rank;
  auto next = JoinAll(*server, {{"a", 1}, {"b", 0}});  // b restarted
  ASSERT_TRUE(next.at("a").ok()) << next.at("a").status().ToString();
  ASSERT_TRUE(next.at("b").ok()) << next.at("b").status().ToString();
  EXPECT_EQ(next.at("b")->epoch, 2u);
  EXPECT_EQ(next.at("b")->rank, b_rank);
}

TEST(ElasticRendezvous, TheResetLimitStopsTheJob) {
  auto server = Serve(1, milliseconds(20000), /*reset_limit=*/1);
  server->SetLiveWorkers({"a"});
  ASSERT_TRUE(JoinAll(*server, {{"a", 0}}).at("a").ok());
  ASSERT_TRUE(JoinAll(*server, {{"a", 1}}).at("a").ok());
  auto over = JoinAll(*server, {{"a", 2}}).at("a");
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(Contains(over.status().message(), "the reset limit (1) is reached"))
      << over.status().ToString();
}

TEST(ElasticRendezvous, AnEpochHoldsAtMostTheMaximum) {
  auto server = Serve(1, milliseconds(20000), -1, /*max=*/2);
  server->SetLiveWorkers({"a", "b", "c"});
  auto out = JoinAll(*server, {{"a", 0}, {"b", 0}, {"c", 0}});
  ASSERT_TRUE(out.at("a").ok());
  ASSERT_TRUE(out.at("b").ok());
  EXPECT_EQ(out.at("b")->size, 2);
  ASSERT_FALSE(out.at("c").ok());
  EXPECT_TRUE(Contains(out.at("c").status().message(), "is full (2 workers, the maximum)"));
}

// A connection names its job by an id derived from its key: another key names no job served
// there (the worker keeps trying until its deadline: an operator taking over may not serve the
// job yet), and the error says so.
TEST(ElasticRendezvous, AnotherJobKeyIsRefused) {
  auto server = Serve(1, milliseconds(20000));
  server->SetLiveWorkers({"a"});
  ElasticJoinOptions o = JoinOptions(*server, "a", 0, 30000);
  o.job_key = "another-job";
  o.timeout = milliseconds(3000);
  auto r = JoinElasticEpoch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_TRUE(Contains(r.status().message(), "serves no job " + ElasticJobId("another-job")))
      << r.status().ToString();
  auto q = QueryMembership({"127.0.0.1", server->port()}, "another-job", 0,
                           Deadline::After(milliseconds(5000)));
  ASSERT_FALSE(q.ok());
  EXPECT_TRUE(Contains(q.status().message(), "serves no job")) << q.status().ToString();
  EXPECT_EQ(server->epoch(), 0u);
}

// Clients that connect and say nothing, or half a Hello, do not hold the server up: it answers
// a genuine worker's query and registration at once (one after another, each stalled client
// would cost 5 s, more than this test's 4 s deadline on the join).
TEST(ElasticRendezvous, StalledClientsDoNotHoldTheServer) {
  auto server = Serve(1, milliseconds(20000));
  server->SetLiveWorkers({"a"});
  std::vector<Fd> stalled;
  const Deadline d = Deadline::After(milliseconds(5000));
  for (int i = 0; i < 8; ++i) {
    auto fd = ConnectTcp({"127.0.0.1", server->port()}, d);
    ASSERT_TRUE(fd.ok());
    if (i % 2 == 1) (void)WriteFull(fd->get(), "KVRD", 4, d, "server");
    stalled.push_back(std::move(fd).value());
  }
  auto q =
      QueryMembership({"127.0.0.1", server->port()}, kKey, 0, Deadline::After(milliseconds(4000)));
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  ElasticJoinOptions o = JoinOptions(*server, "a", 0, 30000);
  o.timeout = milliseconds(4000);
  auto r = JoinElasticEpoch(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST(ElasticRendezvous, NoServerIsADeadlineNamingIt) {
  ElasticJoinOptions o;
  o.server = {"127.0.0.1", 1};  // nothing listens on port 1
  o.job_key = kKey;
  o.worker = "a";
  o.self.host_name = "a";
  o.self.port = 1000;
  o.self.addresses = {{"lo", "127.0.0.1"}};
  o.timeout = milliseconds(500);
  auto r = JoinElasticEpoch(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(r.status().message(), "the elastic rendezvous server at 127.0.0.1:1"))
      << r.status().ToString();
}

// The server is dialed by name, every address the name resolves to in turn (a headless Service in
// front of the operator's replicas: only the leader listens); nobody listening is a deadline
// error naming the name.
TEST(ElasticRendezvous, ServerIsDialedByNameUntilTheDeadline) {
  auto server = Serve(1, milliseconds(20000));
  auto v =
      QueryMembership({"localhost", server->port()}, kKey, 0, Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const uint16_t port = server->port();
  server.reset();  // nobody listens there now
  auto none = QueryMembership({"localhost", port}, kKey, 0, Deadline::After(milliseconds(600)));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(none.status().message(), "any address of localhost:" + std::to_string(port)))
      << none.status().ToString();
}

// A new driver (an operator's new leader) resumes a running job: the members of the epoch it was
// told keep their ranks and register from that epoch; a member from an older one is stale.
TEST(ElasticRendezvous, ResumedServerContinuesTheEpochItWasGiven) {
  ElasticServerOptions o;
  o.job_key = kKey;
  o.min_workers = 1;
  o.timeout = milliseconds(20000);
  o.resume_epoch = 7;
  o.resume_members = {"b", "a"};
  o.resume_resets = 6;
  o.resume_version = 40;
  auto server = ElasticRendezvousServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->epoch(), 7u);
  EXPECT_EQ((*server)->resets(), 6);
  EXPECT_EQ((*server)->formed_version(), 40u);
  // The members formed at version 40 (with the last server): the same live set moves nothing,
  // a newcomer moves the version past theirs, so their next commit sees it.
  (*server)->SetLiveWorkers({"a", "b"});
  auto same = QueryMembership({"127.0.0.1", (*server)->port()}, kKey, 40,
                              Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->update, kNoHostUpdate);
  EXPECT_EQ(same->version, 40u);
  (*server)->SetLiveWorkers({"a", "b", "c"});
  auto added = QueryMembership({"127.0.0.1", (*server)->port()}, kKey, 40,
                               Deadline::After(milliseconds(5000)));
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->update, kHostsAdded);
  EXPECT_EQ(added->version, 41u);
  auto next = JoinAll(**server, {{"c", 0}, {"a", 7}, {"b", 7}});
  for (const auto& [w, a] : next) ASSERT_TRUE(a.ok()) << w << ": " << a.status().ToString();
  EXPECT_EQ(next.at("b")->rank, 0);
  EXPECT_EQ(next.at("a")->rank, 1);
  EXPECT_EQ(next.at("c")->rank, 2);
  EXPECT_EQ(next.at("c")->epoch, 8u);
  EXPECT_EQ(next.at("c")->version, 41u);
  EXPECT_EQ((*server)->formed_version(), 41u);
  EXPECT_EQ((*server)->resets(), 7);
  auto stale = JoinElasticEpoch(JoinOptions(**server, "a", 6, 30100));
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(Contains(stale.status().message(), "stale")) << stale.status().ToString();

  ElasticServerOptions bad = o;
  bad.resume_epoch = 0;
  auto refused = ElasticRendezvousServer::Start(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.status().message(), "need the epoch"))
      << refused.status().ToString();
}

TEST(ElasticFrames, ValuesPastTheirTypesAreRefusedNotWrapped) {
  const std::string table = "\nrank=0 host=h port=1 addr=a\n";
  // A size past an int would wrap to a negative world size; an epoch past 32 bits to another
  // epoch.
  EXPECT_FALSE(
      ParseElasticAssignment("epoch=1 rank=0 size=4294967297 version=1" + table, "w", "s").ok());
  EXPECT_FALSE(
      ParseElasticAssignment("epoch=4294967296 rank=0 size=1 version=1" + table, "w", "s").ok());
  auto ok = ParseElasticAssignment("epoch=3 rank=0 size=1 version=9" + table, "w", "s");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->epoch, 3u);
  EXPECT_EQ(ok->table.size(), 1u);
  EXPECT_FALSE(ParseMembershipVersion("version=1 epoch=4294967296 update=0", "s").ok());
  EXPECT_FALSE(ParseMembershipVersion("version=1 epoch=1 update=4", "s").ok());
  auto v = ParseMembershipVersion("version=2 epoch=1 update=3\nh1/0\n", "s");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->gone, std::vector<std::string>{"h1/0"});
  EXPECT_FALSE(ParseElasticRegistration("worker=w epoch=4294967296" + table).ok());
  auto reg = ParseElasticRegistration("worker=w epoch=2\nrank=0 host=h port=1 addr=a");
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->worker, "w");
  EXPECT_EQ(ParseMembershipQuery("since=12"), 12u);
  EXPECT_EQ(ParseMembershipQuery("since=x"), 0u);
}

}  // namespace
}  // namespace korovod
