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

StatusOr<ElasticAssignment> Join(int port, const std::string& worker, uint32_t last_epoch) {
  ElasticJoinOptions o;
  o.server = {"127.0.0.1", static_cast<uint16_t>(port)};
  o.job_key = "elastic-servers-test-key";
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

}  // namespace
}  // namespace korovod::k8s_operator
