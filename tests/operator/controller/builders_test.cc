// operator/controller builders: the worker pod (trainer env and mounts, native sidecar, volumes,
// GPU/RDMA, networking, scheduling, env precedence), the Service, ConfigMap, Secret and
// PodGroups, the job key helpers, and the samples in crds/samples turned into pods.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "common/base64.h"
#include "operator/api/json.h"
#include "operator/api/validate.h"
#include "operator/controller/child_metadata.h"
#include "operator/controller/job_key_secret.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/worker_pod_builder.h"
#include "operator/controller/worker_ports.h"
#include "operator/controller/world_config_map.h"
#include "operator/controller/world_service.h"
#include "tests/operator/controller/fake_cluster.h"
#include "tests/operator/yaml_to_json.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::MinimalJob;

HorovodJob Parse(const json& object) {
  auto job = HorovodJobFromJson(object);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job.ok() ? *job : HorovodJob{};
}

const json* Named(const json& list, const std::string& name) {
  if (!list.is_array()) return nullptr;
  for (const json& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

std::string EnvValue(const json& container, const std::string& name) {
  const json env = container.value("env", json::array());
  const json* e = Named(env, name);
  return e != nullptr ? e->value("value", "<no value>") : "<unset>";
}

int EnvCount(const json& container, const std::string& name) {
  int n = 0;
  for (const json& e : container.value("env", json::array())) n += e.value("name", "") == name;
  return n;
}

const json& Trainer(const json& pod) { return *Named(pod["spec"]["containers"], "trainer"); }
const json& Sidecar(const json& pod) { return pod["spec"]["initContainers"][0]; }

json Pod(const json& job_object, int index = 1, int epoch = 3) {
  return BuildWorkerPod(Parse(job_object), index, epoch, OperatorSettings{});
}

// --- worker pod ----------------------------------------------------------------------------

TEST(WorkerPod, IdentityLabelsAndDns) {
  json job = MinimalJob(4);
  job["spec"]["template"]["metadata"] = {{"labels", {{"team", "ml"}, {"korovod.dev/epoch", "x"}}},
                                         {"annotations", {{"note", "hi"}}}};
  const json pod = Pod(job);
  EXPECT_EQ(pod["apiVersion"], "v1");
  EXPECT_EQ(pod["kind"], "Pod");
  EXPECT_EQ(pod["metadata"]["name"], "j-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "ns");
  const json& labels = pod["metadata"]["labels"];
  EXPECT_EQ(labels["team"], "ml");
  EXPECT_EQ(labels["korovod.dev/job-name"], "j");
  EXPECT_EQ(labels["korovod.dev/role"], "worker");
  EXPECT_EQ(labels["korovod.dev/replica-index"], "1");
  EXPECT_EQ(labels["korovod.dev/epoch"], "3");  // korovod's labels win over the template's
  EXPECT_EQ(labels["app.kubernetes.io/managed-by"], "korovod-operator");
  EXPECT_EQ(pod["metadata"]["annotations"]["note"], "hi");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["hostname"], "j-worker-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "j");
  EXPECT_FALSE(pod["spec"].contains("hostNetwork"));
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
}

TEST(WorkerPod, TrainerWiring) {
  const json pod = Pod(MinimalJob(4));
  const json& trainer = Trainer(pod);
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_RANK"), "1");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_SIZE"), "4");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_SOCKET"), "/var/run/korovod/sidecar.sock");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_COORDINATOR"), "j-worker-0.j.ns.svc.cluster.local:28500");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_EPOCH"), "3");
  EXPECT_NE(Named(trainer["volumeMounts"], "korovod-socket"), nullptr);
  EXPECT_EQ((*Named(trainer["volumeMounts"], "korovod-socket"))["mountPath"], "/var/run/korovod");
  EXPECT_EQ((*Named(trainer["volumeMounts"], "dshm"))["mountPath"], "/dev/shm");
  EXPECT_FALSE(trainer.contains("resources"));  // no GPUs asked
}

TEST(WorkerPod, NativeSidecar) {
  json job = MinimalJob(4);
  job["spec"]["template"]["spec"]["initContainers"] = json::array({{{"name", "fetch"}}});
  const json pod = Pod(job);
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 2u);
  EXPECT_EQ(pod["spec"]["initContainers"][1]["name"], "fetch");
  const json& sc = Sidecar(pod);
  EXPECT_EQ(sc["name"], "korovod-sidecar");
  EXPECT_EQ(sc["restartPolicy"], "Always");
  EXPECT_EQ(sc["image"], "s");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_RANK"), "1");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_SIZE"), "4");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_COORDINATOR"), "j-worker-0.j.ns.svc.cluster.local:28500");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_SOCKET"), "/var/run/korovod/sidecar.sock");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_EPOCH"), "3");  // in every peer handshake
  EXPECT_EQ(EnvValue(sc, "KOROVOD_JOB_KEY_FILE"), "<unset>");
  // The key reaches the sidecar only, through secretKeyRef (no file a non-root user cannot read).
  const json* key_env = Named(sc["env"], "KOROVOD_JOB_KEY");
  ASSERT_NE(key_env, nullptr);
  EXPECT_EQ((*key_env)["valueFrom"]["secretKeyRef"],
            json::parse(R"({"name": "j-key", "key": "key"})"));
  EXPECT_EQ(Named(pod["spec"]["containers"][0]["env"], "KOROVOD_JOB_KEY"), nullptr);
  EXPECT_EQ(EnvValue(sc, "KOROVOD_SHM_PREFIX"), "/korovod-j-1-");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_METRICS_PORT"), "9090");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_IFACE"), "<unset>");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_FUSION_THRESHOLD"), "<unset>");
  EXPECT_EQ(sc["ports"][0], json::parse(R"({"name": "metrics", "containerPort": 9090,
                                             "protocol": "TCP"})"));
  EXPECT_EQ(sc["readinessProbe"]["httpGet"]["path"], "/readyz");
  EXPECT_EQ(sc["livenessProbe"]["httpGet"]["path"], "/healthz");
  EXPECT_EQ(sc["startupProbe"]["httpGet"]["path"], "/healthz");
  EXPECT_EQ(sc["startupProbe"]["httpGet"]["port"], "metrics");
  // The trainer starts at the first startup success: probed every second. Late answers of a busy
  // engine are not failures within 5 s.
  EXPECT_EQ(sc["startupProbe"]["periodSeconds"], 1);
  for (const char* probe : {"startupProbe", "livenessProbe", "readinessProbe"}) {
    EXPECT_EQ(sc[probe]["timeoutSeconds"], 5) << probe;
  }
  const json& sec = sc["securityContext"];
  EXPECT_EQ(sec["runAsNonRoot"], true);
  // The kubelet takes only the uid of an image without a passwd entry: the group is explicit.
  EXPECT_EQ(sec["runAsUser"], 65532);
  EXPECT_EQ(sec["runAsGroup"], 65532);
  EXPECT_EQ(sec["seccompProfile"], json::parse(R"({"type": "RuntimeDefault"})"));
  EXPECT_EQ(sec["allowPrivilegeEscalation"], false);
  EXPECT_EQ(sec["readOnlyRootFilesystem"], true);
  EXPECT_EQ(sec["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_FALSE(sec["capabilities"].contains("add"));
  EXPECT_NE(Named(sc["volumeMounts"], "korovod-socket"), nullptr);
  EXPECT_NE(Named(sc["volumeMounts"], "dshm"), nullptr);
}

// The trainer joins the sidecar's group, which owns the socket and the arena (0660); the
// template's own groups stay, and fsGroup (a chown of every volume) is not imposed.
TEST(WorkerPod, TrainerSharesTheSidecarsGroup) {
  json job = MinimalJob(2);
  EXPECT_EQ(Pod(job)["spec"]["securityContext"], json::parse(R"({"supplementalGroups": [65532]})"));
  job["spec"]["template"]["spec"]["securityContext"] = {{"runAsUser", 1000},
                                                        {"supplementalGroups", {44, 65532}}};
  EXPECT_EQ(Pod(job)["spec"]["securityContext"],
            json::parse(R"({"runAsUser": 1000, "supplementalGroups": [44, 65532]})"));
}

// Under hostNetwork the ports are the node's: each job takes its own block (placed by its uid),
// declared so the scheduler keeps pods wanting the same port apart; never torchrun's 29500.
TEST(WorkerPod, HostNetworkPortsArePerJobAndDeclared) {
  json job = MinimalJob(3);
  job["spec"]["networking"] = {{"hostNetwork", true}};
  const HorovodJob parsed = Parse(job);
  OperatorSettings settings;
  const json rank0 = BuildWorkerPod(parsed, 0, 1, settings);
  const json rank1 = BuildWorkerPod(parsed, 1, 1, settings);
  const std::string coordinator = EnvValue(Sidecar(rank1), "KOROVOD_COORDINATOR");
  const int port = std::stoi(coordinator.substr(coordinator.rfind(':') + 1));
  EXPECT_GE(port, 20000);
  EXPECT_LE(port, 28999);
  EXPECT_NE(port, 28500);  // not the pod-network default: it is the job's own
  // Rank 0 declares the coordinator port and its metrics port; rank 1 its own metrics port.
  const json ports0 = Sidecar(rank0)["ports"];
  ASSERT_EQ(ports0.size(), 2u);
  EXPECT_EQ((*Named(ports0, "coordinator"))["containerPort"], port);
  const int metrics0 = (*Named(ports0, "metrics"))["containerPort"];
  const int metrics1 = (*Named(Sidecar(rank1)["ports"], "metrics"))["containerPort"];
  EXPECT_NE(metrics0, metrics1);
  EXPECT_NE(metrics0, port);
  EXPECT_EQ(EnvValue(Sidecar(rank1), "KOROVOD_METRICS_PORT"), std::to_string(metrics1));
  EXPECT_EQ(Sidecar(rank1)["ports"].size(), 1u);
  EXPECT_EQ(BuildWorldService(parsed, settings)["spec"]["ports"][0]["port"], port);

  // Another job (another uid) gets another block; the same job always the same one.
  json other = job;
  other["metadata"]["uid"] = "another-uid";
  const std::string c2 =
      EnvValue(Sidecar(BuildWorkerPod(Parse(other), 0, 1, settings)), "KOROVOD_COORDINATOR");
  EXPECT_NE(c2.substr(c2.rfind(':') + 1), std::to_string(port));
  EXPECT_EQ(EnvValue(Sidecar(BuildWorkerPod(parsed, 2, 7, settings)), "KOROVOD_COORDINATOR"),
            coordinator);
}

// Every port of a block stays in the range, and metrics ports never take the coordinator's.
TEST(WorkerPorts, StayInTheRangeAndApart) {
  OperatorSettings settings;
  settings.host_network_port_min = 30000;
  settings.host_network_port_max = 30009;
  for (const char* id : {"a", "b", "c", "some-uid-1234"}) {
    const int coordinator = PortsFor(id, 0, true, settings).coordinator;
    for (int64_t rank = 0; rank < 25; ++rank) {
      const WorkerPorts p = PortsFor(id, rank, true, settings);
      EXPECT_EQ(p.coordinator, coordinator);
      EXPECT_GE(p.metrics, 30000);
      EXPECT_LE(p.metrics, 30009);
      EXPECT_NE(p.metrics, coordinator) << id << " rank " << rank;
    }
  }
  const WorkerPorts pod_network = PortsFor("a", 3, false, settings);
  EXPECT_EQ(pod_network.coordinator, settings.coordinator_port);
  EXPECT_EQ(pod_network.metrics, settings.metrics_port);
}

TEST(WorkerPod, Volumes) {
  const json pod = Pod(MinimalJob(2));
  const json& volumes = pod["spec"]["volumes"];
  ASSERT_EQ(volumes.size(), 2u);
  EXPECT_EQ((*Named(volumes, "korovod-socket"))["emptyDir"], json::object());
  EXPECT_EQ((*Named(volumes, "dshm"))["emptyDir"]["medium"], "Memory");
  // Workers do not talk to the API server: no service-account token unless the template asks.
  EXPECT_EQ(pod["spec"]["automountServiceAccountToken"], false);
  json job = MinimalJob(2);
  job["spec"]["template"]["spec"]["automountServiceAccountToken"] = true;
  EXPECT_EQ(Pod(job)["spec"]["automountServiceAccountToken"], true);
}

TEST(WorkerPod, TemplateVolumesAndMountsAreNotDuplicated) {
  json job = MinimalJob(2);
  job["spec"]["template"]["spec"]["volumes"] =
      json::array({{{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "8Gi"}}}},
                   {{"name", "data"}, {"emptyDir", json::object()}}});
  job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
      json::array({{{"name", "dshm"}, {"mountPath", "/dev/shm"}}});
  const json pod = Pod(job);
  const json& volumes = pod["spec"]["volumes"];
  EXPECT_EQ(volumes.size(), 3u);  // data, dshm (the template's), korovod-socket
  EXPECT_EQ((*Named(volumes, "dshm"))["emptyDir"]["sizeLimit"], "8Gi");  // the template's
  int shm_mounts = 0;
  for (const json& m : Trainer(pod)["volumeMounts"]) shm_mounts += m["mountPath"] == "/dev/shm";
  EXPECT_EQ(shm_mounts, 1);
}

TEST(WorkerPod, KorovodEnvWinsOtherTemplateEnvKept) {
  json job = MinimalJob(2);
  job["spec"]["template"]["spec"]["containers"][0]["env"] =
      json::array({{{"name", "KOROVOD_RANK"}, {"value", "99"}},
                   {{"name", "LOG_PREFIX"}, {"value", "rank-$(KOROVOD_RANK)"}},
                   {{"name", "KOROVOD_CYCLE_TIME"}, {"value", "5"}}});
  const json trainer = Trainer(Pod(job));
  EXPECT_EQ(EnvCount(trainer, "KOROVOD_RANK"), 1);
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_RANK"), "1");
  EXPECT_EQ(EnvValue(trainer, "LOG_PREFIX"), "rank-$(KOROVOD_RANK)");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_CYCLE_TIME"), "5");  // not korovod's: the template's stays
  // Korovod's come first, so $(KOROVOD_RANK) in later entries expands.
  EXPECT_EQ(trainer["env"][0]["name"], "KOROVOD_RANK");
}

TEST(WorkerPod, GpusRdmaAndIpcLock) {
  json job = MinimalJob(2);
  job["spec"]["worker"] = {{"gpus", 8}, {"rdma", {{"resourceName", "rdma/ib"}, {"count", 2}}}};
  job["spec"]["sidecar"]["resources"] = {{"requests", {{"cpu", "1"}}}};
  const json pod = Pod(job);
  EXPECT_EQ(Trainer(pod)["resources"]["limits"]["nvidia.com/gpu"], "8");
  const json& sc = Sidecar(pod);
  EXPECT_EQ(sc["resources"]["limits"]["rdma/ib"], "2");
  EXPECT_EQ(sc["resources"]["requests"]["cpu"], "1");
  EXPECT_FALSE(sc["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_EQ(sc["securityContext"]["capabilities"]["add"], json::array({"IPC_LOCK"}));
  EXPECT_FALSE(Trainer(pod)["resources"]["limits"].contains("rdma/ib"));
}

// A worker of several ranks (gpus: 2, so ranksPerWorker defaults to 2): ranks 2 and 3 in pod 1,
// one sidecar serving both, the trainer's command run once per local rank by korovod-local-ranks.
TEST(WorkerPod, SeveralRanksPerWorker) {
  json job = MinimalJob(2);
  job["spec"]["worker"] = {{"gpus", 2}};
  json& trainer_spec = job["spec"]["template"]["spec"]["containers"][0];
  trainer_spec["command"] = {"python3", "train.py"};
  trainer_spec["args"] = {"--epochs", "3"};
  const json pod = Pod(job, 1);
  const json trainer = Trainer(pod);
  EXPECT_EQ(trainer["command"],
            json::array({"korovod-local-ranks", "--", "python3", "train.py", "--epochs", "3"}));
  EXPECT_FALSE(trainer.contains("args"));
  EXPECT_EQ(trainer["terminationMessagePolicy"], "FallbackToLogsOnError");
  for (const json& c : {trainer, Sidecar(pod)}) {
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(EnvValue(c, "KOROVOD_RANK"), "2");
    EXPECT_EQ(EnvValue(c, "KOROVOD_SIZE"), "4");
    EXPECT_EQ(EnvValue(c, "KOROVOD_SIDECAR_RANKS"), "2");
    EXPECT_EQ(EnvValue(c, "KOROVOD_LOCAL_SIZE"), "2");
    EXPECT_EQ(EnvValue(c, "KOROVOD_CROSS_RANK"), "1");
    EXPECT_EQ(EnvValue(c, "KOROVOD_CROSS_SIZE"), "2");
    EXPECT_NE(EnvValue(c, "KOROVOD_SOCKET").find("/sidecar-{local_rank}.sock"), std::string::npos);
  }
  EXPECT_EQ(Trainer(pod)["resources"]["limits"]["nvidia.com/gpu"], "2");

  // ranksPerWorker: 1 keeps one rank per pod whatever the GPUs.
  job["spec"]["worker"] = {{"gpus", 8}, {"ranksPerWorker", 1}};
  const json one = Pod(job, 1);
  EXPECT_EQ(Trainer(one)["command"], json::array({"python3", "train.py"}));
  EXPECT_EQ(EnvValue(Trainer(one), "KOROVOD_RANK"), "1");
  EXPECT_EQ(EnvValue(Trainer(one), "KOROVOD_SIZE"), "2");
  EXPECT_EQ(EnvCount(Sidecar(one), "KOROVOD_SIDECAR_RANKS"), 0);
}

// GPUs the trainer and the sidecar both see: a Dynamic Resource Allocation claim the trainer
// names is named by the sidecar too; with the device plugin's nvidia.com/gpu (the trainer's
// alone) the sidecar gets the runtime's NVIDIA_VISIBLE_DEVICES=all instead.
TEST(WorkerPod, TheSidecarSeesTheTrainersGpus) {
  json job = MinimalJob(2);
  json& tspec = job["spec"]["template"]["spec"];
  tspec["resourceClaims"] = {{{"name", "gpus"}, {"resourceClaimTemplateName", "two-gpus"}}};
  tspec["containers"][0]["resources"] = {{"claims", {{{"name", "gpus"}}}}};
  json pod = Pod(job);
  EXPECT_EQ(Sidecar(pod)["resources"]["claims"], json::array({{{"name", "gpus"}}}));
  EXPECT_EQ(Trainer(pod)["resources"]["claims"], json::array({{{"name", "gpus"}}}));
  EXPECT_EQ(pod["spec"]["resourceClaims"], tspec["resourceClaims"]);
  EXPECT_EQ(EnvCount(Sidecar(pod), "NVIDIA_VISIBLE_DEVICES"), 0);

  json plugin = MinimalJob(2);
  plugin["spec"]["worker"] = {{"gpus", 2}, {"ranksPerWorker", 1}};
  pod = Pod(plugin);
  EXPECT_EQ(EnvValue(Sidecar(pod), "NVIDIA_VISIBLE_DEVICES"), "all");
  EXPECT_EQ(EnvValue(Sidecar(pod), "NVIDIA_DRIVER_CAPABILITIES"), "compute,utility");
  EXPECT_FALSE(Sidecar(pod)["resources"].contains("claims"));
  EXPECT_EQ(Trainer(pod)["resources"]["limits"]["nvidia.com/gpu"], "2");

  // CPU workers: nothing of either.
  pod = Pod(MinimalJob(2));
  EXPECT_EQ(EnvCount(Sidecar(pod), "NVIDIA_VISIBLE_DEVICES"), 0);
  EXPECT_FALSE(Sidecar(pod)["resources"].contains("claims"));
}

TEST(WorkerPod, ExtendedResourceRequestsFollowTheLimits) {
  json job = MinimalJob(2);
  job["spec"]["worker"] = {{"gpus", 4}, {"rdma", {{"count", 1}}}};
  job["spec"]["template"]["spec"]["containers"][0]["resources"] = {
      {"requests", {{"nvidia.com/gpu", "1"}, {"cpu", "4"}}}};
  job["spec"]["sidecar"]["resources"] = {{"requests", {{"rdma/hca", "3"}}}};
  const json pod = Pod(job);
  EXPECT_EQ(Trainer(pod)["resources"]["requests"]["nvidia.com/gpu"], "4");
  EXPECT_EQ(Trainer(pod)["resources"]["requests"]["cpu"], "4");
  EXPECT_EQ(Trainer(pod)["resources"]["limits"]["nvidia.com/gpu"], "4");
  EXPECT_EQ(Sidecar(pod)["resources"]["requests"]["rdma/hca"], "1");
  EXPECT_EQ(Sidecar(pod)["resources"]["limits"]["rdma/hca"], "1");
}

TEST(WorkerPod, NetworkingAndEngine) {
  json job = MinimalJob(2);
  job["spec"]["networking"] = {{"hostNetwork", true}, {"interface", "ib0"}};
  job["spec"]["sidecar"]["engine"] = {
      {"fusionThresholdBytes", 67108864}, {"cycleTimeMs", 3.5}, {"timeline", "/var/log/k/t.json"}};
  const json pod = Pod(job);
  EXPECT_EQ(pod["spec"]["hostNetwork"], true);
  EXPECT_EQ(pod["spec"]["dnsPolicy"], "ClusterFirstWithHostNet");
  const json& sc = Sidecar(pod);
  EXPECT_EQ(EnvValue(sc, "KOROVOD_IFACE"), "ib0");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_FUSION_THRESHOLD"), "67108864");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_CYCLE_TIME"), "3.5");
  EXPECT_EQ(EnvValue(sc, "KOROVOD_TIMELINE"), "/var/log/k/t.json");
  // The read-only root filesystem gets a writable directory for the timeline.
  EXPECT_EQ((*Named(sc["volumeMounts"], "korovod-timeline"))["mountPath"], "/var/log/k");
  EXPECT_NE(Named(pod["spec"]["volumes"], "korovod-timeline"), nullptr);
}

TEST(WorkerPod, SidecarEnvIsAppendedAfterWhatTheOperatorSets) {
  json job = MinimalJob(2);
  job["spec"]["sidecar"]["env"] = {{{"name", "KOROVOD_AUTOTUNE"}, {"value", "1"}},
                                   {{"name", "HOROVOD_STALL_CHECK_TIME_SECONDS"}, {"value", "5"}}};
  const json env = Sidecar(Pod(job))["env"];
  ASSERT_GE(env.size(), 2u);
  EXPECT_EQ(env[env.size() - 2], (json{{"name", "KOROVOD_AUTOTUNE"}, {"value", "1"}}));
  EXPECT_EQ(env.back(), (json{{"name", "HOROVOD_STALL_CHECK_TIME_SECONDS"}, {"value", "5"}}));
}

// spec.sidecar.env may not set what the operator sets: Validate's list must cover every variable
// the builder writes, with every optional field on.
TEST(WorkerPod, EveryVariableTheOperatorSetsIsReserved) {
  json job = MinimalJob(2);
  job["spec"]["networking"] = {{"interface", "ib0"}};
  job["spec"]["sidecar"]["engine"] = {
      {"fusionThresholdBytes", 1}, {"cycleTimeMs", 1}, {"timeline", "/t/x.json"}};
  const json pod = Pod(job);  // a range-for over Sidecar(Pod(job)) would read a dead temporary
  for (const json& e : Sidecar(pod)["env"]) {
    const std::string name = e["name"];
    bool reserved = false;
    for (const auto& [n, use] : kSidecarEnvSetByOperator) reserved = reserved || n == name;
    EXPECT_TRUE(reserved) << name << " is set by the operator but not in kSidecarEnvSetByOperator";
  }
}

TEST(WorkerPod, SchedulingPolicy) {
  json job = MinimalJob(2);
  job["spec"]["schedulingPolicy"] = {{"schedulerName", "custom"}, {"priorityClassName", "high"}};
  json pod = Pod(job);
  EXPECT_EQ(pod["spec"]["schedulerName"], "custom");
  EXPECT_EQ(pod["spec"]["priorityClassName"], "high");

  job["spec"]["schedulingPolicy"] = {{"gang", {{"enabled", true}, {"provider", "volcano"}}}};
  pod = Pod(job);
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "j");

  job["spec"]["schedulingPolicy"] = {
      {"gang", {{"enabled", true}, {"provider", "scheduler-plugins"}}}};
  pod = Pod(job);
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "j");
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
}

TEST(WorkerPod, MultiContainerTemplateWiresOnlyTheTrainer) {
  json job = MinimalJob(2);
  job["spec"]["template"]["spec"]["containers"] =
      json::array({{{"name", "logger"}, {"image", "l"}}, {{"name", "trainer"}, {"image", "t"}}});
  const json pod = Pod(job);
  EXPECT_EQ(EnvValue(pod["spec"]["containers"][0], "KOROVOD_RANK"), "<unset>");
  EXPECT_EQ(EnvValue(pod["spec"]["containers"][1], "KOROVOD_RANK"), "1");
}

// --- other children ------------------------------------------------------------------------

TEST(Children, ServiceConfigMapSecretPodGroups) {
  json job_object = MinimalJob(3);
  job_object["spec"]["schedulingPolicy"] = {{"priorityClassName", "high"},
                                            {"gang", {{"enabled", true}, {"provider", "volcano"}}}};
  const HorovodJob job = Parse(job_object);
  const OperatorSettings settings;

  const json svc = BuildWorldService(job, settings);
  EXPECT_EQ(svc["metadata"]["name"], "j");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"],
            json::parse(R"({"korovod.dev/job-name": "j", "korovod.dev/role": "worker"})"));
  EXPECT_EQ(svc["spec"]["ports"][0]["name"], "coordinator");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 28500);

  const json cm = BuildWorldConfigMap(job, 7, settings);
  EXPECT_EQ(cm["metadata"]["name"], "j-world");
  EXPECT_EQ(cm["data"]["epoch"], "7");
  EXPECT_EQ(cm["data"]["size"], "3");
  EXPECT_EQ(cm["data"]["coordinator"], "j-worker-0.j.ns.svc.cluster.local:28500");
  EXPECT_EQ(cm["data"]["members"],
            "j-worker-0.j.ns.svc.cluster.local\nj-worker-1.j.ns.svc.cluster.local\n"
            "j-worker-2.j.ns.svc.cluster.local");

  const json secret = BuildJobKeySecret(job, testing::kTestKeyHex);
  EXPECT_EQ(secret["metadata"]["name"], "j-key");
  EXPECT_EQ(secret["type"], "Opaque");
  EXPECT_EQ(secret["data"]["key"], Base64Encode(testing::kTestKeyHex));
  // Immutable: nobody (user or controller) can swap the key under a running world; the API
  // server rejects any update of data or of the flag, so a new key means delete and recreate.
  EXPECT_EQ(secret["immutable"], true);

  const json volcano = BuildPodGroup(job);
  EXPECT_EQ(volcano["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(volcano["kind"], "PodGroup");
  EXPECT_EQ(volcano["spec"]["minMember"], 3);  // minAvailable defaults to replicas
  EXPECT_EQ(volcano["spec"]["priorityClassName"], "high");

  job_object["spec"]["schedulingPolicy"]["gang"] = {
      {"enabled", true}, {"provider", "scheduler-plugins"}, {"minAvailable", 2}};
  const json plugins = BuildPodGroup(Parse(job_object));
  EXPECT_EQ(plugins["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(plugins["spec"]["minMember"], 2);
}

TEST(Children, SettingsAreHonoured) {
  OperatorSettings settings;
  settings.coordinator_port = 4000;
  settings.metrics_port = 8081;
  settings.socket_dir = "/run/kv";
  settings.cluster_domain = "example.org";
  const json pod = BuildWorkerPod(Parse(MinimalJob(2)), 0, 1, settings);
  EXPECT_EQ(EnvValue(Trainer(pod), "KOROVOD_COORDINATOR"), "j-worker-0.j.ns.svc.example.org:4000");
  EXPECT_EQ(EnvValue(Trainer(pod), "KOROVOD_SOCKET"), "/run/kv/sidecar.sock");
  EXPECT_EQ(EnvValue(Sidecar(pod), "KOROVOD_METRICS_PORT"), "8081");
  EXPECT_EQ(Sidecar(pod)["ports"][0]["containerPort"], 8081);
}

// --- helpers -------------------------------------------------------------------------------

// Base64 and RFC 3339 have their own tests in tests/common.

TEST(Helpers, JobKeyValidation) {
  EXPECT_TRUE(IsValidJobKeyHex(testing::kTestKeyHex));
  EXPECT_FALSE(IsValidJobKeyHex(""));
  EXPECT_FALSE(IsValidJobKeyHex(std::string(64, 'g')));
}

// The owner's uid, not the job-name label, makes a child the job's: a namesake's are not.
TEST(Helpers, ControlledByMatchesTheControllerUid) {
  StatusOr<HorovodJob> job = HorovodJobFromJson(MinimalJob());
  ASSERT_TRUE(job.ok());
  const json child = {{"metadata", ChildMetadata(*job, "j")}};
  EXPECT_TRUE(ControlledBy(child, "job-uid"));
  EXPECT_FALSE(ControlledBy(child, "other-uid"));
  EXPECT_FALSE(ControlledBy(child, ""));
  json not_controller = child;
  not_controller["metadata"]["ownerReferences"][0]["controller"] = false;
  EXPECT_FALSE(ControlledBy(not_controller, "job-uid"));
  json orphaned = child;
  orphaned["metadata"].erase("ownerReferences");
  EXPECT_FALSE(ControlledBy(orphaned, "job-uid"));
  EXPECT_FALSE(ControlledBy(json::object(), "job-uid"));
  EXPECT_FALSE(ControlledBy(json{{"metadata", {{"ownerReferences", "x"}}}}, "job-uid"));
}

// --- the samples ---------------------------------------------------------------------------

TEST(Samples, ProduceValidPods) {
  const std::string dir = std::string(KOROVOD_SOURCE_DIR) + "/crds/samples";
  int samples = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++samples;
    SCOPED_TRACE(entry.path().string());
    json job = testing::LoadYamlFileAsJson(entry.path().string());
    job["metadata"]["namespace"] = "default";
    job["metadata"]["uid"] = "u";
    const HorovodJob parsed = Parse(job);
    ASSERT_TRUE(Validate(parsed.metadata.name, parsed.spec).ok());
    ObservedState o;
    o.job = job;
    o.now_unix = 1800000000;
    o.fresh_key_hex = testing::kTestKeyHex;
    ReconcileResult r = Reconcile(o);
    // A gang job's workers come once its PodGroup is observed.
    for (const Action& a : r.actions) {
      if (a.kind == Action::Kind::kCreate && a.object["kind"] == "PodGroup") {
        o.pod_groups.push_back(a.object);
      }
    }
    if (!o.pod_groups.empty()) r = Reconcile(o);
    std::set<std::string> pods;
    for (const Action& a : r.actions) {
      if (a.kind != Action::Kind::kCreate || a.object["kind"] != "Pod") continue;
      const json& pod = a.object;
      pods.insert(pod["metadata"]["name"].get<std::string>());
      EXPECT_LE(pod["metadata"]["name"].get<std::string>().size(), 63u);
      EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
      const json& sc = Sidecar(pod);
      EXPECT_EQ(sc["name"], "korovod-sidecar");
      EXPECT_LT(EnvValue(sc, "KOROVOD_SOCKET").size(), 100u);  // unix socket path limit
      const std::string prefix = EnvValue(sc, "KOROVOD_SHM_PREFIX");
      EXPECT_EQ(prefix.front(), '/');
      EXPECT_EQ(prefix.find('/', 1), std::string::npos);
      // Every volume a container mounts exists, and names are unique.
      std::set<std::string> volumes;
      for (const json& v : pod["spec"]["volumes"]) {
        EXPECT_TRUE(volumes.insert(v["name"].get<std::string>()).second);
      }
      for (const char* list : {"containers", "initContainers"}) {
        std::set<std::string> names;
        for (const json& c : pod["spec"][list]) {
          EXPECT_TRUE(names.insert(c["name"].get<std::string>()).second);
          for (const json& m : c.value("volumeMounts", json::array())) {
            EXPECT_EQ(volumes.count(m["name"].get<std::string>()), 1u) << m.dump();
          }
          std::set<std::string> env;
          for (const json& e : c.value("env", json::array())) {
            EXPECT_TRUE(env.insert(e["name"].get<std::string>()).second) << e.dump();
          }
        }
      }
      EXPECT_EQ(EnvValue(Trainer(pod), "KOROVOD_SIZE"), std::to_string(WorldSize(parsed.spec)));
    }
    EXPECT_EQ(static_cast<int64_t>(pods.size()), parsed.spec.replicas);
  }
  EXPECT_EQ(samples, 4);
}

TEST(Samples, GpuRdmaSampleDetails) {
  json job = testing::LoadYamlFileAsJson(std::string(KOROVOD_SOURCE_DIR) +
                                         "/crds/samples/gpu-rdma-job.yaml");
  job["metadata"]["namespace"] = "default";
  const json pod = Pod(job, 7, 1);
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "vision");
  EXPECT_EQ(Trainer(pod)["resources"]["limits"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(EnvValue(Trainer(pod), "NCCL_DEBUG"), "WARN");
  EXPECT_EQ(Sidecar(pod)["resources"]["limits"]["rdma/hca"], "1");
  EXPECT_EQ(Sidecar(pod)["resources"]["limits"]["memory"], "4Gi");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(EnvValue(Sidecar(pod), "KOROVOD_IFACE"), "ib0");
  // The CUDA sidecar (NCCL backend), sharing the worker's GPUs (ADR 0012).
  EXPECT_EQ(Sidecar(pod)["image"], "ghcr.io/korovod/sidecar-cuda:latest");
  EXPECT_EQ(EnvValue(Sidecar(pod), "NVIDIA_VISIBLE_DEVICES"), "all");
}

}  // namespace
}  // namespace korovod::k8s_operator
