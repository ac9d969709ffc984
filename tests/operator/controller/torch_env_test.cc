// torchrun's variables on a HorovodJob worker's trainer (operator/controller/torch_env.h): what an
// unmodified `dist.init_process_group("korovod")` reads through env://, for one and several ranks
// per pod, elastic jobs, hostNetwork, and the user's own values left alone.
#include "operator/controller/torch_env.h"

#include <gtest/gtest.h>

#include <string>

#include "operator/api/json.h"
#include "operator/controller/worker_pod_builder.h"
#include "operator/controller/worker_ports.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::MinimalJob;

json Build(const json& job_object, int index, const std::string& elastic_rendezvous = "") {
  auto job = HorovodJobFromJson(job_object);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return BuildWorkerPod(*job, index, 3, OperatorSettings{}, elastic_rendezvous);
}

const json& TrainerOf(const json& pod) { return pod["spec"]["containers"][0]; }

std::string Env(const json& container, const std::string& name) {
  for (const json& e : container.value("env", json::array())) {
    if (e.value("name", "") == name) return e.value("value", "<no value>");
  }
  return "<unset>";
}

int Count(const json& container, const std::string& name) {
  int n = 0;
  for (const json& e : container.value("env", json::array())) n += e.value("name", "") == name;
  return n;
}

TEST(TorchEnv, OneRankPerPodGetsTorchrunsVariables) {
  const json pod = Build(MinimalJob(3), 2);
  const json& trainer = TrainerOf(pod);
  EXPECT_EQ(Env(trainer, "RANK"), "2");
  EXPECT_EQ(Env(trainer, "WORLD_SIZE"), "3");
  EXPECT_EQ(Env(trainer, "LOCAL_RANK"), "0");
  EXPECT_EQ(Env(trainer, "LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(Env(trainer, "GROUP_RANK"), "2");
  // Rank 0's pod, the host of KOROVOD_COORDINATOR, and torchrun's port.
  EXPECT_EQ(Env(trainer, "MASTER_ADDR"), "j-worker-0.j.ns.svc.cluster.local");
  EXPECT_EQ(Env(trainer, "KOROVOD_COORDINATOR"), Env(trainer, "MASTER_ADDR") + ":28500");
  EXPECT_EQ(Env(trainer, "MASTER_PORT"), "29500");
  // The store is the trainer's: the sidecar gets none of them.
  const json& sidecar = pod["spec"]["initContainers"][0];
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}) {
    EXPECT_EQ(Env(sidecar, name), "<unset>") << name;
  }
  // Every pod agrees on the store; no declared port in the pod's own network.
  const json rank0 = TrainerOf(Build(MinimalJob(3), 0));
  EXPECT_EQ(Env(rank0, "RANK"), "0");
  EXPECT_EQ(Env(rank0, "MASTER_ADDR"), Env(trainer, "MASTER_ADDR"));
  EXPECT_FALSE(rank0.contains("ports"));
}

TEST(TorchEnv, TheUsersOwnValuesWin) {
  json job = MinimalJob(2);
  job["spec"]["template"]["spec"]["containers"][0]["env"] =
      json::parse(R"([{"name": "MASTER_PORT", "value": "23456"},
                      {"name": "LOCAL_RANK", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                      {"name": "KOROVOD_RANK", "value": "7"}])");
  const json trainer = TrainerOf(Build(job, 1));
  EXPECT_EQ(Env(trainer, "MASTER_PORT"), "23456");
  EXPECT_EQ(Count(trainer, "MASTER_PORT"), 1);
  EXPECT_EQ(Count(trainer, "LOCAL_RANK"), 1);
  EXPECT_EQ(Env(trainer, "LOCAL_RANK"), "<no value>");  // the user's valueFrom, untouched
  EXPECT_EQ(Env(trainer, "RANK"), "1");
  EXPECT_EQ(Env(trainer, "KOROVOD_RANK"), "1");  // korovod's own still win over the template
}

// ranksPerWorker 2 on 2 workers: korovod-local-ranks gives each local rank its RANK and
// LOCAL_RANK; the pod's env carries what all its ranks share.
TEST(TorchEnv, SeveralRanksPerPodLeaveRankToLocalRanks) {
  json job = MinimalJob(2);
  job["spec"]["worker"] = {{"gpus", 2}};
  job["spec"]["template"]["spec"]["containers"][0]["command"] = {"python3", "train.py"};
  const json trainer = TrainerOf(Build(job, 1));
  EXPECT_EQ(trainer["command"][0], "korovod-local-ranks");
  EXPECT_EQ(Env(trainer, "RANK"), "<unset>");
  EXPECT_EQ(Env(trainer, "LOCAL_RANK"), "<unset>");
  EXPECT_EQ(Env(trainer, "WORLD_SIZE"), "4");
  EXPECT_EQ(Env(trainer, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(Env(trainer, "GROUP_RANK"), "1");
  EXPECT_EQ(Env(trainer, "MASTER_ADDR"), "j-worker-0.j.ns.svc.cluster.local");
  EXPECT_EQ(Env(trainer, "MASTER_PORT"), "29500");
}

// An elastic job's ranks and world change by membership epoch: nothing that names them.
TEST(TorchEnv, ElasticWorkersGetOnlyTheirPlaceInThePod) {
  json job = MinimalJob(3);
  job["spec"]["elastic"] = {{"minReplicas", 2}};
  const json trainer = TrainerOf(Build(job, 1, "operator.korovod-system:29400"));
  EXPECT_EQ(Env(trainer, "HOROVOD_ELASTIC"), "1");
  EXPECT_EQ(Env(trainer, "LOCAL_RANK"), "0");
  EXPECT_EQ(Env(trainer, "LOCAL_WORLD_SIZE"), "1");
  for (const char* name : {"RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    EXPECT_EQ(Env(trainer, name), "<unset>") << name;
  }
}

// Under hostNetwork the store's port is the node's: the job's own (never 29500, which another
// job's rank 0 on the node may hold), declared on rank 0's trainer so the scheduler sees it.
TEST(TorchEnv, HostNetworkStorePortIsTheJobsAndDeclared) {
  json job = MinimalJob(3);
  job["spec"]["networking"] = {{"hostNetwork", true}};
  const json rank0 = Build(job, 0);
  const json rank2 = Build(job, 2);
  const std::string port = Env(TrainerOf(rank0), "MASTER_PORT");
  EXPECT_EQ(Env(TrainerOf(rank2), "MASTER_PORT"), port);
  const int p = std::stoi(port);
  EXPECT_GE(p, 20000);
  EXPECT_LE(p, 28999);
  ASSERT_TRUE(TrainerOf(rank0).contains("ports"));
  EXPECT_EQ(TrainerOf(rank0)["ports"], json::parse(R"([{"name": "torch-store", "protocol": "TCP",
                                                        "containerPort": )" +
                                                   port + "}]"));
  EXPECT_FALSE(TrainerOf(rank2).contains("ports"));
  // Not a port of the sidecars' block: the coordinator's nor any worker's metrics.
  for (const json& pod : {rank0, rank2, Build(job, 1)}) {
    for (const json& declared : pod["spec"]["initContainers"][0]["ports"]) {
      EXPECT_NE(declared["containerPort"].get<int>(), p) << declared;
    }
  }
  // A user's MASTER_PORT is theirs to place: nothing declared for it.
  job["spec"]["template"]["spec"]["containers"][0]["env"] =
      json::parse(R"([{"name": "MASTER_PORT", "value": "23456"}])");
  EXPECT_FALSE(TrainerOf(Build(job, 0)).contains("ports"));
}

TEST(WorkerPorts, TorchStoreInTheBlockApartFromTheSidecars) {
  OperatorSettings settings;
  settings.host_network_port_min = 30000;
  settings.host_network_port_max = 30009;
  for (const char* id : {"a", "b", "c", "some-uid-1234"}) {
    const WorkerPorts first = PortsFor(id, 0, true, settings);
    EXPECT_GE(first.torch_store, 30000);
    EXPECT_LE(first.torch_store, 30009);
    EXPECT_NE(first.torch_store, first.coordinator) << id;
    // Apart from every worker's metrics port while the job fits its block (span - 2 workers).
    for (int64_t rank = 0; rank < 8; ++rank) {
      const WorkerPorts p = PortsFor(id, rank, true, settings);
      EXPECT_EQ(p.torch_store, first.torch_store);
      EXPECT_NE(p.metrics, p.torch_store) << id << " rank " << rank;
    }
  }
  EXPECT_EQ(PortsFor("a", 3, false, settings).torch_store, kTorchStorePort);
}

}  // namespace
}  // namespace korovod::k8s_operator
