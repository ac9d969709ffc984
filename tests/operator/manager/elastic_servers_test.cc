// ElasticServers: the membership servers the leader hosts for elastic jobs. A directive starts a
// job's server (or updates its live workers), a formed epoch wakes the job's reconcile, an edit of
// the settings restarts the server where it was, on its port, and no directive stops it.
#include "operator/manager/elastic_servers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace korovod::k8s_operator {
namespace {

using std::chrono::milliseconds;

ElasticDirective Directive(std::vector<std::string> live) {
  ElasticDirective d;
  d.job_key = "elastic-servers-test-key";
  d.min_workers = 1;
  d.max_workers = 4;
  d.timeout_seconds = 20;
  d.live = std::move(live);
  return d;
}

StatusOr<ElasticAssignment> Join(int port, const std::string& worker, uint32_t last_epoch,
                                 const std::string& key = "elastic-servers-test-key") {
  ElasticJoinOptions o;
  o.server = {"127.0.0.1", static_cast<uint16_t>(port)};
  o.job_key = key;
  o.worker = worker;
  o.last_epoch = last_epoch;
  o.self.host_name = worker;
  o.self.node = "n";
  o.self.port = 30500;
  o.self.addresses = {{"lo", "127.0.0.1"}};
  o.timeout = milliseconds(10000);
  return JoinElasticEpoch(o);
}

TEST(ElasticServers, StartFormWakeRestartOnEditAndStop) {
  std::atomic<int> woken{0};
  ElasticServers servers([&](const std::string& key) {
    if (key == "ns/j") ++woken;
  });
  EXPECT_FALSE(servers.Observe("ns/j", "uid-1"));
  ASSERT_TRUE(servers.Apply("ns/j", "uid-1", Directive({"w0.u"})).ok());
  auto seen = servers.Observe("ns/j", "uid-1");
  ASSERT_TRUE(seen);
  EXPECT_GT(seen->port, 0);
  EXPECT_EQ(seen->epoch, 0);
  EXPECT_FALSE(servers.Observe("ns/j", "uid-2"));  // a namesake job is not this one
  EXPECT_EQ(servers.JobKeys(), std::vector<std::string>{"ns/j"});

  auto a = Join(seen->port, "w0.u", 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->epoch, 1u);
  // The watcher wakes the job's reconcile: no API event says an epoch formed.
  for (int i = 0; i < 100 && woken.load() == 0; ++i) std::this_thread::sleep_for(milliseconds(50));
  EXPECT_GT(woken.load(), 0);
  seen = servers.Observe("ns/j", "uid-1");
  EXPECT_EQ(seen->epoch, 1);
  EXPECT_EQ(seen->members, std::vector<std::string>{"w0.u"});

  // spec.elastic edited: the server starts again from the directive's state, on its port.
  ElasticDirective edited = Directive({"w0.u"});
  edited.min_workers = 2;
  edited.port = seen->port;
  edited.resume_epoch = 1;
  edited.resume_members = {"w0.u"};
  edited.resume_version = seen->formed_version;
  ASSERT_TRUE(servers.Apply("ns/j", "uid-1", edited).ok());
  auto again = servers.Observe("ns/j", "uid-1");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->port, seen->port);
  EXPECT_EQ(again->epoch, 1);
  EXPECT_EQ(again->members, std::vector<std::string>{"w0.u"});

  // No directive (finished, suspended, deleted): stopped.
  ASSERT_TRUE(servers.Apply("ns/j", "uid-1", std::nullopt).ok());
  EXPECT_FALSE(servers.Observe("ns/j", "uid-1"));
  EXPECT_TRUE(servers.JobKeys().empty());
}

// Two operators that both believe they lead (a deposed leader resumed after SIGSTOP, and the new
// one): a worker that met the new leader's token refuses the old one's server, naming both
// tokens; once the old one learns it is deposed, its servers and listener stop at once and it
// starts no other.
TEST(ElasticServers, ADeposedLeadersServerIsRefusedThenStops) {
  ElasticServers deposed([](const std::string&) {});
  ElasticServers current([](const std::string&) {});
  deposed.SetFencingToken(1);
  current.SetFencingToken(2);
  ASSERT_TRUE(deposed.Apply("ns/j", "uid-1", Directive({"w0.u"})).ok());
  ASSERT_TRUE(current.Apply("ns/j", "uid-1", Directive({"w0.u"})).ok());
  const int old_port = deposed.Observe("ns/j", "uid-1")->port;
  const int new_port = current.Observe("ns/j", "uid-1")->port;
  auto joined = Join(new_port, "w0.u", 0);
  ASSERT_TRUE(joined.ok()) << joined.status().ToString();
  EXPECT_EQ(joined->token, 2u);

  MembershipQuery q;
  q.since = joined->version;
  q.min_token = joined->token;
  auto fenced = QueryMembership({"127.0.0.1", static_cast<uint16_t>(old_port)},
                                "elastic-servers-test-key", q, Deadline::After(milliseconds(5000)));
  ASSERT_FALSE(fenced.ok());
  EXPECT_NE(fenced.status().message().find("fencing token 1, below the token 2"), std::string::npos)
      << fenced.status().ToString();

  deposed.Depose();
  EXPECT_FALSE(deposed.Observe("ns/j", "uid-1"));
  auto none = QueryMembership({"127.0.0.1", static_cast<uint16_t>(old_port)},
                              "elastic-servers-test-key", 0, Deadline::After(milliseconds(500)));
  EXPECT_FALSE(none.ok());  // nothing listens there any more
  Status again = deposed.Apply("ns/j", "uid-1", Directive({"w0.u"}));
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("no longer the leader"), std::string::npos) << again.ToString();
}

// Every elastic job of the leader is served on one listener, on the configured port.
TEST(ElasticServers, EveryJobIsServedOnTheOnePort) {
  uint16_t port = 0;
  {
    auto probe = MembershipListener::Start({});
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  ElasticServers servers([](const std::string&) {}, port);
  ElasticDirective a = Directive({"a.u"});
  ElasticDirective b = Directive({"b.u"});
  b.job_key = "another-job-key";
  ASSERT_TRUE(servers.Apply("ns/a", "uid-a", a).ok());
  ASSERT_TRUE(servers.Apply("ns/b", "uid-b", b).ok());
  EXPECT_EQ(servers.Observe("ns/a", "uid-a")->port, port);
  EXPECT_EQ(servers.Observe("ns/b", "uid-b")->port, port);
  auto ja = Join(port, "a.u", 0);
  auto jb = Join(port, "b.u", 0, "another-job-key");
  ASSERT_TRUE(ja.ok()) << ja.status().ToString();
  ASSERT_TRUE(jb.ok()) << jb.status().ToString();
  EXPECT_EQ(servers.Observe("ns/a", "uid-a")->members, std::vector<std::string>{"a.u"});
  EXPECT_EQ(servers.Observe("ns/b", "uid-b")->members, std::vector<std::string>{"b.u"});
}

}  // namespace
}  // namespace korovod::k8s_operator
