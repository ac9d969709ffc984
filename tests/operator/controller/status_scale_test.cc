// operator/controller: the status of a 4096-rank job, static and elastic, stays far below etcd's
// object limit (under 256 KiB) while its ranks start, once all run and once all succeeded; a new
// leader still resumes an elastic job's membership from the compact status.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/reconciler.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::FakeCluster;
using testing::FindEvent;
using testing::MinimalJob;

constexpr int64_t kT0 = 1'800'000'000;
constexpr int kRanks = 4096;
constexpr size_t kStatusLimit = 256 * 1024;

size_t StatusBytes(const FakeCluster& c) { return c.status().dump().size(); }

// As a cloud provider names nodes: eight pods to a node.
std::string NodeOf(int i) {
  return "ip-10-0-" + std::to_string(i / 8 / 250) + "-" + std::to_string(i / 8 % 250) +
         ".eu-west-1.compute.internal";
}

int IndexOf(const json& pod) {
  return std::stoi(pod["metadata"]["labels"]["korovod.dev/replica-index"].get<std::string>());
}

void SetRunning(json& pod, bool ready) {
  pod["spec"]["nodeName"] = NodeOf(IndexOf(pod));
  pod["status"]["phase"] = "Running";
  pod["status"]["containerStatuses"] =
      json::array({{{"name", "trainer"}, {"state", {{"running", json::object()}}}}});
  pod["status"]["conditions"] =
      json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}});
}

void SetPullingImage(json& pod) {
  pod["status"]["phase"] = "Pending";
  pod["status"]["containerStatuses"] = json::array(
      {{{"name", "trainer"},
        {"state",
         {{"waiting",
           {{"reason", "ImagePullBackOff"},
            {"message",
             "Back-off pulling image \"registry.example.com/research/trainer:2026.11.29\""}}}}}}});
}

TEST(StatusScale, A4096RankStaticJobStaysUnder256KiB) {
  FakeCluster c(MinimalJob(kRanks));
  c.Step(kT0);
  ASSERT_EQ(c.pods().size(), static_cast<size_t>(kRanks));
  c.Step(kT0 + 1);
  EXPECT_LT(StatusBytes(c), kStatusLimit);
  EXPECT_EQ(c.status()["rankSummary"], "Pending:0-4095");
  EXPECT_EQ(c.status()["workers"].size(), kMaxListedWorkers);
  EXPECT_EQ(c.status()["unlistedWorkers"], kRanks - static_cast<int>(kMaxListedWorkers));

  // While the ranks start: a third wait for their image, a third run, a third are Ready.
  for (json& pod : c.pods()) {
    const int i = IndexOf(pod);
    if (i % 3 == 0) {
      SetPullingImage(pod);
    } else {
      SetRunning(pod, i % 3 == 2);
    }
  }
  c.Step(kT0 + 2);
  const size_t starting = StatusBytes(c);
  EXPECT_LT(starting, kStatusLimit);
  const json workers = c.status()["workers"];
  ASSERT_EQ(workers.size(), kMaxListedWorkers);
  // The ranks with a reason come first: each listed one says why it is not running.
  for (const json& w : workers) {
    EXPECT_EQ(w["reason"], "ImagePullBackOff") << w.dump();
    EXPECT_NE(w["message"].get<std::string>().find("registry.example.com"), std::string::npos);
  }
  EXPECT_EQ(workers[0]["rank"], 0);
  EXPECT_EQ(workers[1]["rank"], 3);
  const int not_ready = kRanks - kRanks / 3;  // ranks 2, 5, 8, ... are Ready
  EXPECT_EQ(c.status()["unlistedWorkers"], not_ready - static_cast<int>(kMaxListedWorkers));
  EXPECT_EQ(c.status()["readyWorkers"], kRanks / 3);

  // Every rank Ready.
  for (json& pod : c.pods()) SetRunning(pod, true);
  c.Step(kT0 + 3);
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_LT(StatusBytes(c), kStatusLimit);
  EXPECT_FALSE(c.status().contains("workers"));
  EXPECT_EQ(c.status()["rankSummary"], "Ready:0-4095");
  EXPECT_EQ(c.status()["readyWorkers"], kRanks);

  // Every rank succeeded, and PodGC took half of the pods already.
  for (json& pod : c.pods()) {
    pod["status"]["phase"] = "Succeeded";
    pod["status"]["containerStatuses"] =
        json::array({{{"name", "trainer"},
                      {"state", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}}}});
  }
  c.Step(kT0 + 4);
  std::erase_if(c.pods(), [](const json& pod) { return IndexOf(pod) % 2 == 1; });
  c.Step(kT0 + 5);
  EXPECT_EQ(c.status()["phase"], "Succeeded");
  EXPECT_LT(StatusBytes(c), kStatusLimit);
  EXPECT_EQ(c.status()["finishedRanks"],
            json::parse(R"([{"ranks": "0-4095", "state": "Succeeded", "reason": "Completed"}])"));
  EXPECT_EQ(c.status()["succeededWorkers"], kRanks);
  std::printf("4096-rank static job: status %zu bytes while starting, %zu once succeeded\n",
              starting, StatusBytes(c));
}

ReconcileResult ElasticStep(FakeCluster& c, int64_t now,
                            std::optional<ObservedState::ElasticServer> server) {
  ObservedState o = c.Observe(now);
  o.settings.elastic_rendezvous_host = "10.0.0.9";
  o.elastic_server = std::move(server);
  ReconcileResult r = Reconcile(o);
  c.Apply(r);
  return r;
}

TEST(StatusScale, A4096RankElasticJobStaysUnder256KiBAndANewLeaderResumesIt) {
  json job = MinimalJob(kRanks);
  job["spec"]["elastic"] = {{"minReplicas", 1}};
  FakeCluster c(job);
  ObservedState::ElasticServer server;
  server.port = 7000;
  ElasticStep(c, kT0, std::nullopt);
  ElasticStep(c, kT0 + 1, server);
  ASSERT_EQ(c.pods().size(), static_cast<size_t>(kRanks));
  // Real pod uids are 36 characters.
  std::vector<std::string> ids;
  for (json& pod : c.pods()) {
    const std::string tail = std::to_string(100000000000 + IndexOf(pod));
    pod["metadata"]["uid"] = "0c4f6a1e-7d2b-4c8e-9f3a-" + tail;
    SetRunning(pod, true);
    ids.push_back(pod["metadata"]["name"].get<std::string>() + "." +
                  pod["metadata"]["uid"].get<std::string>());
  }
  std::sort(ids.begin(), ids.end());  // the server ranks newcomers by id
  server.epoch = 1;
  server.members = ids;
  server.formed_version = 4096;
  ReconcileResult r = ElasticStep(c, kT0 + 2, server);
  EXPECT_EQ(c.status()["phase"], "Running");
  EXPECT_LT(StatusBytes(c), kStatusLimit);
  EXPECT_EQ(c.status()["worldSize"], kRanks);
  EXPECT_EQ(c.status()["elastic"]["memberUids"].get<std::string>().size(), 8u * kRanks);
  EXPECT_FALSE(c.status().contains("workers"));
  const Action* formed = FindEvent(r, "MembershipChanged");
  ASSERT_NE(formed, nullptr);
  EXPECT_LT(formed->message.size(), 1024u) << "the event names the first ranks only";

  // A new leader: no server yet. It resumes the epoch with every member's id, by rank.
  r = ElasticStep(c, kT0 + 3, std::nullopt);
  ASSERT_TRUE(r.elastic);
  EXPECT_EQ(r.elastic->resume_epoch, 1);
  EXPECT_EQ(r.elastic->resume_version, 4096u);
  EXPECT_EQ(r.elastic->port, 7000);
  EXPECT_EQ(r.elastic->resume_members, ids);
  std::printf("4096-rank elastic job: status %zu bytes\n", StatusBytes(c));

  // Half the workers leave at once: the event names the first 16 of them and counts the rest.
  server.epoch = 2;
  server.members.assign(ids.begin(), ids.begin() + kRanks / 2);
  server.formed_version = 4097;
  r = ElasticStep(c, kT0 + 4, server);
  const Action* shrunk = FindEvent(r, "MembershipChanged");
  ASSERT_NE(shrunk, nullptr);
  EXPECT_LT(shrunk->message.size(), 2048u) << shrunk->message.substr(0, 4096);
  EXPECT_NE(shrunk->message.find("and " + std::to_string(kRanks / 2 - 16) + " more"),
            std::string::npos)
      << shrunk->message.substr(0, 2048);
}

}  // namespace
}  // namespace korovod::k8s_operator
