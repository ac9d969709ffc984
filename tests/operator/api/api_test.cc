// operator/api: HorovodJob parsing, defaults, error paths, semantic validation, conditions; the
// CRD schema agrees with the C++ constants; the samples parse.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "operator/api/conditions.h"
#include "operator/api/json.h"
#include "operator/api/types.h"
#include "operator/api/validate.h"
#include "tests/operator/yaml_to_json.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;
using testing::LoadYamlFileAsJson;

const std::string kSourceDir = KOROVOD_SOURCE_DIR;

json MinimalJob() {
  return json::parse(R"({
    "apiVersion": "korovod.dev/v1alpha1", "kind": "HorovodJob",
    "metadata": {"name": "j", "namespace": "ns", "generation": 2},
    "spec": {"replicas": 2,
             "template": {"spec": {"containers": [{"name": "trainer", "image": "t"}]}},
             "sidecar": {"image": "s"}}})");
}

HorovodJobSpec MinimalSpec() {
  auto job = HorovodJobFromJson(MinimalJob());
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  return job->spec;
}

// --- parsing -------------------------------------------------------------------------------

TEST(HorovodJobFromJson, ParsesFullObject) {
  json j = MinimalJob();
  j["metadata"]["uid"] = "u-1";
  j["metadata"]["resourceVersion"] = "42";
  j["metadata"]["labels"] = {{"team", "ml"}};
  j["spec"]["replicas"] = 8;
  j["spec"]["worker"] = {
      {"gpus", 4}, {"ranksPerWorker", 2}, {"rdma", {{"resourceName", "rdma/ib"}, {"count", 2}}}};
  j["spec"]["template"]["spec"]["containers"][0]["command"] = {"python3", "train.py"};
  j["spec"]["sidecar"]["resources"] = {{"requests", {{"cpu", "1"}}}};
  j["spec"]["sidecar"]["engine"] = {
      {"fusionThresholdBytes", 1 << 20}, {"cycleTimeMs", 2.5}, {"timeline", "/tmp/t.json"}};
  j["spec"]["networking"] = {{"hostNetwork", true}, {"interface", "ib0"}};
  j["spec"]["runPolicy"] = {{"cleanPodPolicy", "All"},
                            {"backoffLimit", 5},
                            {"activeDeadlineSeconds", 600},
                            {"ttlSecondsAfterFinished", 0},
                            {"suspend", true}};
  j["spec"]["schedulingPolicy"] = {
      {"schedulerName", "volcano"},
      {"priorityClassName", "high"},
      {"gang", {{"enabled", true}, {"provider", "scheduler-plugins"}, {"minAvailable", 8}}}};
  j["status"] = json::parse(R"({"phase": "Running", "readyWorkers": 7, "activeWorkers": 8,
      "restartCount": 1, "epoch": 3, "succeededWorkers": 0, "failedWorkers": 0,
      "observedGeneration": 2, "startTime": "2026-01-01T00:00:00Z",
      "coordinatorAddress": "j-worker-0.j:29500",
      "conditions": [{"type": "Running", "status": "True", "observedGeneration": 2,
                      "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "AllReady",
                      "message": "8/8"}]})");

  auto job = HorovodJobFromJson(j);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->metadata.name, "j");
  EXPECT_EQ(job->metadata.namespace_name, "ns");
  EXPECT_EQ(job->metadata.uid, "u-1");
  EXPECT_EQ(job->metadata.resource_version, "42");
  EXPECT_EQ(job->metadata.generation, 2);
  EXPECT_EQ(job->metadata.labels.at("team"), "ml");
  const HorovodJobSpec& s = job->spec;
  EXPECT_EQ(s.replicas, 8);
  EXPECT_EQ(s.pod_template["spec"]["containers"][0]["image"], "t");
  EXPECT_EQ(s.worker.gpus, 4);
  EXPECT_EQ(s.worker.ranks_per_worker, 2);
  EXPECT_EQ(RanksPerWorker(s.worker), 2);
  EXPECT_EQ(WorldSize(s), 16);
  EXPECT_EQ(s.worker.rdma.resource_name, "rdma/ib");
  EXPECT_EQ(s.worker.rdma.count, 2);
  EXPECT_EQ(s.sidecar.image, "s");
  EXPECT_EQ(s.sidecar.resources["requests"]["cpu"], "1");
  EXPECT_EQ(s.sidecar.engine.fusion_threshold_bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(*s.sidecar.engine.cycle_time_ms, 2.5);
  EXPECT_EQ(s.sidecar.engine.timeline, "/tmp/t.json");
  EXPECT_TRUE(s.networking.host_network);
  EXPECT_EQ(s.networking.interface_name, "ib0");
  EXPECT_EQ(s.run_policy.clean_pod_policy, CleanPodPolicy::kAll);
  EXPECT_EQ(s.run_policy.backoff_limit, 5);
  EXPECT_EQ(s.run_policy.active_deadline_seconds, 600);
  EXPECT_EQ(s.run_policy.ttl_seconds_after_finished, 0);
  EXPECT_TRUE(s.run_policy.suspend);
  EXPECT_EQ(s.scheduling_policy.scheduler_name, "volcano");
  EXPECT_EQ(s.scheduling_policy.priority_class_name, "high");
  EXPECT_TRUE(s.scheduling_policy.gang.enabled);
  EXPECT_EQ(s.scheduling_policy.gang.provider, GangProvider::kSchedulerPlugins);
  EXPECT_EQ(s.scheduling_policy.gang.min_available, 8);
  const HorovodJobStatus& st = job->status;
  EXPECT_EQ(st.phase, JobPhase::kRunning);
  EXPECT_EQ(st.ready_workers, 7);
  EXPECT_EQ(st.epoch, 3);
  EXPECT_EQ(st.coordinator_address, "j-worker-0.j:29500");
  ASSERT_EQ(st.conditions.size(), 1u);
  EXPECT_EQ(st.conditions[0].status, ConditionStatus::kTrue);
  EXPECT_EQ(st.conditions[0].reason, "AllReady");
  EXPECT_TRUE(Validate(job->metadata.name, s).ok());

  // Status round trip through ToJson.
  auto again = HorovodJobStatusFromJson(ToJson(st));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ToJson(*again), ToJson(st));
  EXPECT_EQ(ToJson(st), j["status"]);
}

TEST(HorovodJobFromJson, AppliesDefaults) {
  json j = MinimalJob();
  j["spec"]["worker"] = {{"rdma", {{"count", 1}}}};
  auto job = HorovodJobFromJson(j);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const HorovodJobSpec& s = job->spec;
  EXPECT_EQ(s.worker.gpus, 0);
  EXPECT_EQ(s.worker.rdma.resource_name, kDefaultRdmaResourceName);
  EXPECT_EQ(s.run_policy.clean_pod_policy, CleanPodPolicy::kRunning);
  EXPECT_EQ(s.run_policy.backoff_limit, 3);
  EXPECT_FALSE(s.run_policy.suspend);
  EXPECT_FALSE(s.run_policy.active_deadline_seconds.has_value());
  EXPECT_FALSE(s.run_policy.ttl_seconds_after_finished.has_value());
  EXPECT_FALSE(s.sidecar.engine.cycle_time_ms.has_value());
  EXPECT_FALSE(s.networking.host_network);
  EXPECT_FALSE(s.scheduling_policy.gang.enabled);
  EXPECT_FALSE(job->status.phase.has_value());
  // Null is the same as absent.
  j["spec"]["runPolicy"] = {{"backoffLimit", nullptr}};
  job = HorovodJobFromJson(j);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.run_policy.backoff_limit, kDefaultBackoffLimit);
}

struct BadField {
  const char* name;
  const char* json_pointer;  // where to put the value
  json value;
  const char* message;  // the whole Status message
};

class BadFieldTest : public ::testing::TestWithParam<BadField> {};

TEST_P(BadFieldTest, NamesThePath) {
  json j = MinimalJob();
  const BadField& p = GetParam();
  j[json::json_pointer(p.json_pointer)] = p.value;
  auto job = HorovodJobFromJson(j);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), p.message);
}

json Containers(json list) { return json{{"spec", {{"containers", std::move(list)}}}}; }

INSTANTIATE_TEST_SUITE_P(
    Fields, BadFieldTest,
    ::testing::Values(
        BadField{"Replicas0", "/spec/replicas", 0, "spec.replicas: must be >= 1"},
        BadField{"ReplicasString", "/spec/replicas", "4",
                 "spec.replicas: must be an integer, got string"},
        BadField{"ReplicasFloat", "/spec/replicas", 1.5,
                 "spec.replicas: must be an integer, got number"},
        BadField{"ReplicasMissing", "/spec/replicas", nullptr, "spec.replicas: required"},
        BadField{"TemplateMissing", "/spec/template", nullptr, "spec.template: required"},
        BadField{"TemplateNoSpec", "/spec/template", json::object(),
                 "spec.template.spec: required"},
        BadField{"NoContainers", "/spec/template", Containers(json::array()),
                 "spec.template.spec.containers: must have at least 1 item"},
        BadField{"ContainerNoName", "/spec/template",
                 Containers(json::array({json{{"image", "x"}}})),
                 "spec.template.spec.containers[0].name: required"},
        BadField{"GpusNegative", "/spec/worker/gpus", -1, "spec.worker.gpus: must be >= 0"},
        BadField{"RdmaCountNegative", "/spec/worker/rdma/count", -2,
                 "spec.worker.rdma.count: must be >= 0"},
        BadField{"RdmaNameNotString", "/spec/worker/rdma/resourceName", 7,
                 "spec.worker.rdma.resourceName: must be a string, got number"},
        BadField{"SidecarMissing", "/spec/sidecar", nullptr, "spec.sidecar: required"},
        BadField{"SidecarImageMissing", "/spec/sidecar", json::object(),
                 "spec.sidecar.image: required"},
        BadField{"SidecarImageEmpty", "/spec/sidecar/image", "",
                 "spec.sidecar.image: must not be empty"},
        BadField{"FusionNegative", "/spec/sidecar/engine/fusionThresholdBytes", -1,
                 "spec.sidecar.engine.fusionThresholdBytes: must be >= 0"},
        BadField{"CycleZero", "/spec/sidecar/engine/cycleTimeMs", 0,
                 "spec.sidecar.engine.cycleTimeMs: must be > 0"},
        BadField{"HostNetworkString", "/spec/networking/hostNetwork", "true",
                 "spec.networking.hostNetwork: must be a boolean, got string"},
        BadField{"CleanPodPolicy", "/spec/runPolicy/cleanPodPolicy", "Some",
                 "spec.runPolicy.cleanPodPolicy: must be one of Running, All, None, got "
                 "\"Some\""},
        BadField{"BackoffNegative", "/spec/runPolicy/backoffLimit", -1,
                 "spec.runPolicy.backoffLimit: must be >= 0"},
        BadField{"DeadlineZero", "/spec/runPolicy/activeDeadlineSeconds", 0,
                 "spec.runPolicy.activeDeadlineSeconds: must be >= 1"},
        BadField{"TtlNegative", "/spec/runPolicy/ttlSecondsAfterFinished", -5,
                 "spec.runPolicy.ttlSecondsAfterFinished: must be >= 0"},
        BadField{"GangProvider", "/spec/schedulingPolicy/gang/provider", "kueue",
                 "spec.schedulingPolicy.gang.provider: must be one of volcano, "
                 "scheduler-plugins, got \"kueue\""},
        BadField{"GangMinAvailable0", "/spec/schedulingPolicy/gang/minAvailable", 0,
                 "spec.schedulingPolicy.gang.minAvailable: must be >= 1"},
        BadField{"UnknownSpecField", "/spec/replica", 3, "spec.replica: unknown field"},
        BadField{"UnknownRunPolicyField", "/spec/runPolicy/backoff", 3,
                 "spec.runPolicy.backoff: unknown field"},
        BadField{"WorkerNotObject", "/spec/worker", json::array(),
                 "spec.worker: must be an object, got array"},
        BadField{"StatusPhase", "/status/phase", "Done",
                 "status.phase: must be one of Pending, Running, Restarting, Succeeded, Failed, "
                 "Suspended, got \"Done\""},
        BadField{"ConditionStatus", "/status/conditions",
                 json::array({{{"type", "Running"}, {"status", "Yes"}}}),
                 "status.conditions[0].status: must be one of True, False, Unknown, got "
                 "\"Yes\""},
        BadField{"Kind", "/kind", "MPIJob", "kind: must be HorovodJob, got \"MPIJob\""},
        BadField{"ApiVersion", "/apiVersion", "korovod.dev/v1",
                 "apiVersion: must be korovod.dev/v1alpha1, got \"korovod.dev/v1\""},
        BadField{"NameMissing", "/metadata/name", nullptr, "metadata.name: required"}),
    [](const ::testing::TestParamInfo<BadField>& info) { return info.param.name; });

TEST(HorovodJobFromJson, RejectsNonObject) {
  auto job = HorovodJobFromJson(json::array());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(), "object: must be an object, got array");
}

// --- semantic validation -----------------------------------------------------------------

TEST(Validate, MinimalSpecIsValid) {
  Verdict v = Validate("j", MinimalSpec());
  EXPECT_TRUE(v.ok()) << v.reason << ": " << v.message;
  EXPECT_EQ(v.reason, kReasonValid);
}

TEST(Validate, GangMinAvailableAboveReplicas) {
  HorovodJobSpec s = MinimalSpec();
  s.scheduling_policy.gang = {true, GangProvider::kVolcano, 3};
  Verdict v = Validate("j", s);
  EXPECT_EQ(v.reason, kReasonGangMinAvailableExceedsReplicas);
  EXPECT_NE(v.message.find("minAvailable is 3 but spec.replicas is 2"), std::string::npos)
      << v.message;
  s.scheduling_policy.gang.min_available = 2;
  EXPECT_TRUE(Validate("j", s).ok());
}

TEST(Validate, GangWithoutProvider) {
  HorovodJobSpec s = MinimalSpec();
  s.scheduling_policy.gang.enabled = true;
  EXPECT_EQ(Validate("j", s).reason, kReasonGangProviderMissing);
}

TEST(Validate, RanksPerWorkerNeedsAGpuEachAndTheTrainersCommand) {
  HorovodJobSpec s = MinimalSpec();
  s.worker.gpus = 2;
  s.worker.ranks_per_worker = 4;
  Verdict v = Validate("j", s);
  EXPECT_EQ(v.reason, kReasonRanksExceedGpus);
  EXPECT_NE(v.message.find("ranksPerWorker is 4 but each worker has 2 GPUs"), std::string::npos)
      << v.message;
  // 2 ranks from 2 GPUs (the default): the command must be known to run it per local rank.
  s.worker.ranks_per_worker = 0;
  v = Validate("j", s);
  EXPECT_EQ(v.reason, kReasonLocalRanksNeedCommand);
  EXPECT_NE(v.message.find("ranksPerWorker is 2 (from gpus)"), std::string::npos) << v.message;
  s.pod_template["spec"]["containers"][0]["command"] = {"python3", "train.py"};
  EXPECT_TRUE(Validate("j", s).ok()) << Validate("j", s).message;
  // Without GPUs any number of CPU ranks per worker.
  s.worker.gpus = 0;
  s.worker.ranks_per_worker = 3;
  EXPECT_TRUE(Validate("j", s).ok());
  EXPECT_EQ(WorldSize(s), 3 * s.replicas);
}

TEST(Validate, RdmaWithoutResourceName) {
  HorovodJobSpec s = MinimalSpec();
  s.worker.rdma = {"", 1};
  EXPECT_EQ(Validate("j", s).reason, kReasonRdmaResourceNameMissing);
  s.worker.rdma.count = 0;  // no RDMA asked: an empty name is harmless
  EXPECT_TRUE(Validate("j", s).ok());
}

TEST(Validate, TrainerContainer) {
  HorovodJobSpec s = MinimalSpec();
  // A single container is the trainer whatever its name.
  s.pod_template["spec"]["containers"][0]["name"] = "main";
  EXPECT_TRUE(Validate("j", s).ok());
  EXPECT_EQ(TrainerContainerIndex(s), 0);
  // Two containers, none named "trainer": ambiguous.
  s.pod_template["spec"]["containers"].push_back({{"name", "logger"}});
  Verdict v = Validate("j", s);
  EXPECT_EQ(v.reason, kReasonTrainerContainerNotFound);
  EXPECT_NE(v.message.find("has 2 containers"), std::string::npos) << v.message;
  s.pod_template["spec"]["containers"][1]["name"] = "trainer";
  EXPECT_EQ(TrainerContainerIndex(s), 1);
  EXPECT_TRUE(Validate("j", s).ok());
}

TEST(Validate, ReservedSidecarName) {
  HorovodJobSpec s = MinimalSpec();
  s.pod_template["spec"]["initContainers"] = json::array({{{"name", "korovod-sidecar"}}});
  Verdict v = Validate("j", s);
  EXPECT_EQ(v.reason, kReasonReservedContainerName);
  EXPECT_NE(v.message.find("initContainers"), std::string::npos) << v.message;
}

TEST(Validate, RestartPolicy) {
  HorovodJobSpec s = MinimalSpec();
  s.pod_template["spec"]["restartPolicy"] = "OnFailure";
  EXPECT_EQ(Validate("j", s).reason, kReasonUnsupportedRestartPolicy);
  s.pod_template["spec"]["restartPolicy"] = "Never";
  EXPECT_TRUE(Validate("j", s).ok());
}

TEST(Validate, Interface) {
  HorovodJobSpec s = MinimalSpec();
  s.networking = {true, ""};  // host network, engine picks the interface: fine
  EXPECT_TRUE(Validate("j", s).ok());
  s.networking.interface_name = "eth0";
  EXPECT_TRUE(Validate("j", s).ok());
  for (const char* bad : {"eth 0", "a/b", "a-very-long-interface-name", ".."}) {
    s.networking.interface_name = bad;
    EXPECT_EQ(Validate("j", s).reason, kReasonInvalidInterfaceName) << bad;
  }
}

TEST(Validate, SidecarEnv) {
  HorovodJobSpec s = MinimalSpec();
  s.sidecar.env = {{"KOROVOD_AUTOTUNE", "1"}, {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"}};
  EXPECT_TRUE(Validate("j", s).ok()) << Validate("j", s).message;
  struct Case {
    std::vector<EnvEntry> env;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{{"PATH", "/bin"}}, "spec.sidecar.env[0] PATH: not an engine variable"},
           {{{"KOROVOD_", "x"}}, "not an engine variable"},
           {{{"korovod_autotune", "1"}}, "not an engine variable"},
           {{{"KOROVOD_RANK", "0"}}, "set by the operator from the worker's index"},
           {{{"HOROVOD_CYCLE_TIME", "2"}}, "spec.sidecar.engine.cycleTimeMs"},
           {{{"KOROVOD_AUTOTUNE", "1"}, {"KOROVOD_AUTOTUNE", "0"}}, "given twice"},
       }) {
    s.sidecar.env = c.env;
    const Verdict v = Validate("j", s);
    EXPECT_EQ(v.reason, kReasonInvalidSidecarEnv) << c.expect;
    EXPECT_NE(v.message.find(c.expect), std::string::npos) << v.message;
  }
}

TEST(HorovodJobFromJson, SidecarEnv) {
  json object = {{"apiVersion", "korovod.dev/v1alpha1"},
                 {"kind", "HorovodJob"},
                 {"metadata", {{"name", "j"}}},
                 {"spec",
                  {{"replicas", 1},
                   {"template", {{"spec", {{"containers", {{{"name", "trainer"}}}}}}}},
                   {"sidecar",
                    {{"image", "s"},
                     {"env",
                      {{{"name", "KOROVOD_AUTOTUNE"}, {"value", "1"}},
                       {{"name", "KOROVOD_AUTOTUNE_LOG"}}}}}}}}};
  auto job = HorovodJobFromJson(object);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.sidecar.env,
            (std::vector<EnvEntry>{{"KOROVOD_AUTOTUNE", "1"}, {"KOROVOD_AUTOTUNE_LOG", ""}}));
  object["spec"]["sidecar"]["env"] = {{{"value", "1"}}};
  EXPECT_EQ(HorovodJobFromJson(object).status().message(), "spec.sidecar.env[0].name: required");
  object["spec"]["sidecar"]["env"] = {{{"name", "KOROVOD_X"}, {"valueFrom", {}}}};
  EXPECT_EQ(HorovodJobFromJson(object).status().message(),
            "spec.sidecar.env[0].valueFrom: unknown field");
  object["spec"]["sidecar"]["env"] = "KOROVOD_X=1";
  EXPECT_EQ(HorovodJobFromJson(object).status().message(),
            "spec.sidecar.env: must be a list, got string");
}

TEST(Validate, NameTooLong) {
  HorovodJobSpec s = MinimalSpec();
  s.replicas = 100;
  const std::string ok_name(63 - std::string("-worker-99").size(), 'a');
  EXPECT_TRUE(Validate(ok_name, s).ok());
  EXPECT_EQ(Validate(ok_name + "a", s).reason, kReasonNameTooLong);
}

// --- conditions --------------------------------------------------------------------------

TEST(SetCondition, TransitionTimeChangesOnlyWhenStatusFlips) {
  using std::chrono::seconds;
  const auto t0 = std::chrono::system_clock::time_point(seconds(1'800'000'000));
  std::vector<Condition> cs;
  EXPECT_TRUE(
      SetCondition(cs, kConditionRunning, ConditionStatus::kFalse, "Creating", "0/4", 1, t0));
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].last_transition_time, "2027-01-15T08:00:00Z");
  EXPECT_EQ(cs[0].observed_generation, 1);

  // Same status, new message and generation: updated, time kept.
  EXPECT_TRUE(SetCondition(cs, kConditionRunning, ConditionStatus::kFalse, "Creating", "2/4", 2,
                           t0 + seconds(5)));
  EXPECT_EQ(cs[0].message, "2/4");
  EXPECT_EQ(cs[0].observed_generation, 2);
  EXPECT_EQ(cs[0].last_transition_time, "2027-01-15T08:00:00Z");

  // Nothing new: no change reported.
  EXPECT_FALSE(SetCondition(cs, kConditionRunning, ConditionStatus::kFalse, "Creating", "2/4", 2,
                            t0 + seconds(9)));
  EXPECT_EQ(cs[0].last_transition_time, "2027-01-15T08:00:00Z");

  // Flip: time moves.
  EXPECT_TRUE(SetCondition(cs, kConditionRunning, ConditionStatus::kTrue, "AllReady", "4/4", 2,
                           t0 + seconds(10)));
  EXPECT_EQ(cs[0].status, ConditionStatus::kTrue);
  EXPECT_EQ(cs[0].last_transition_time, "2027-01-15T08:00:10Z");

  // Another type is a separate entry.
  EXPECT_TRUE(SetCondition(cs, kConditionSpecValid, ConditionStatus::kTrue, "Valid", "", 2,
                           t0 + seconds(11)));
  ASSERT_EQ(cs.size(), 2u);
  ASSERT_NE(FindCondition(cs, kConditionSpecValid), nullptr);
  EXPECT_EQ(FindCondition(cs, kConditionSpecValid)->last_transition_time, "2027-01-15T08:00:11Z");
  EXPECT_EQ(FindCondition(cs, kConditionFailed), nullptr);
  EXPECT_EQ(ToJson(cs[0])["status"], "True");
}

// --- the CRD and the C++ constants agree ---------------------------------------------------

class CrdSchema : public ::testing::Test {
 protected:
  void SetUp() override {
    crd_ = LoadYamlFileAsJson(kSourceDir + "/crds/korovod.dev_horovodjobs.yaml");
    ASSERT_EQ(crd_["spec"]["versions"].size(), 1u);
    version_ = crd_["spec"]["versions"][0];
    schema_ = version_["schema"]["openAPIV3Schema"];
  }
  // The schema of the field at a dotted path such as "spec.runPolicy.backoffLimit".
  json Field(const std::string& dotted) const {
    json node = schema_;
    size_t start = 0;
    while (start <= dotted.size()) {
      size_t dot = dotted.find('.', start);
      if (dot == std::string::npos) dot = dotted.size();
      const std::string key = dotted.substr(start, dot - start);
      EXPECT_TRUE(node["properties"].contains(key)) << dotted << ": no " << key;
      node = node["properties"][key];
      start = dot + 1;
    }
    return node;
  }
  template <size_t N>
  static json Names(const std::array<std::string_view, N>& names) {
    json out = json::array();
    for (std::string_view n : names) out.push_back(std::string(n));
    return out;
  }

  json crd_, version_, schema_;
};

TEST_F(CrdSchema, IdentityMatches) {
  EXPECT_EQ(crd_["metadata"]["name"], std::string(kPlural) + "." + std::string(kGroup));
  EXPECT_EQ(crd_["spec"]["group"], std::string(kGroup));
  EXPECT_EQ(crd_["spec"]["scope"], "Namespaced");
  EXPECT_EQ(crd_["spec"]["names"]["kind"], std::string(kKind));
  EXPECT_EQ(crd_["spec"]["names"]["plural"], std::string(kPlural));
  EXPECT_EQ(crd_["spec"]["names"]["shortNames"], json::array({std::string(kShortName)}));
  EXPECT_EQ(version_["name"], std::string(kVersion));
  EXPECT_TRUE(version_["subresources"].contains("status"));
  json columns = json::array();
  for (const auto& c : version_["additionalPrinterColumns"]) columns.push_back(c["name"]);
  EXPECT_EQ(columns,
            json::array({"Phase", "Ready", "Workers", "Age", "Epoch", "Restarts", "Ranks"}));
}

TEST_F(CrdSchema, EnumsMatch) {
  EXPECT_EQ(Field("spec.runPolicy.cleanPodPolicy")["enum"], Names(kCleanPodPolicyNames));
  EXPECT_EQ(Field("spec.schedulingPolicy.gang.provider")["enum"], Names(kGangProviderNames));
  EXPECT_EQ(Field("status.phase")["enum"], Names(kJobPhaseNames));
  EXPECT_EQ(Field("status.conditions")["items"]["properties"]["status"]["enum"],
            Names(kConditionStatusNames));
}

TEST_F(CrdSchema, DefaultsMatch) {
  EXPECT_EQ(Field("spec.runPolicy.cleanPodPolicy")["default"],
            std::string(Name(kDefaultCleanPodPolicy)));
  EXPECT_EQ(Field("spec.runPolicy.backoffLimit")["default"], kDefaultBackoffLimit);
  EXPECT_EQ(Field("spec.runPolicy.suspend")["default"], kDefaultSuspend);
  EXPECT_EQ(Field("spec.worker.rdma.resourceName")["default"],
            std::string(kDefaultRdmaResourceName));
  // The C++ structs default to the same values.
  RunPolicy rp;
  EXPECT_EQ(rp.backoff_limit, Field("spec.runPolicy.backoffLimit")["default"].get<int64_t>());
  EXPECT_EQ(rp.suspend, Field("spec.runPolicy.suspend")["default"].get<bool>());
  EXPECT_EQ(RdmaSpec{}.resource_name, Field("spec.worker.rdma.resourceName")["default"]);
}

TEST_F(CrdSchema, MinimumsMatch) {
  EXPECT_EQ(Field("spec.replicas")["minimum"], kMinReplicas);
  EXPECT_EQ(Field("spec.runPolicy.activeDeadlineSeconds")["minimum"], kMinActiveDeadlineSeconds);
  EXPECT_EQ(Field("spec.schedulingPolicy.gang.minAvailable")["minimum"], kMinGangMinAvailable);
  EXPECT_EQ(Field("spec.runPolicy.startupTimeoutSeconds")["minimum"], kMinStartupTimeoutSeconds);
  EXPECT_EQ(Field("spec.runPolicy.startupTimeoutSeconds")["maximum"], kMaxStartupTimeoutSeconds);
  EXPECT_EQ(Field("spec.runPolicy.startupTimeoutSeconds")["default"],
            kDefaultStartupTimeoutSeconds);
  EXPECT_EQ(RunPolicy{}.startup_timeout_seconds, kDefaultStartupTimeoutSeconds);
  // Beyond the sidecar's bound is refused naming the field (the schema does the same).
  json too_long = MinimalJob();
  too_long["spec"]["runPolicy"] = {{"startupTimeoutSeconds", kMaxStartupTimeoutSeconds + 1}};
  auto parsed = HorovodJobFromJson(too_long);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "spec.runPolicy.startupTimeoutSeconds: must be <= 86400");
  for (const char* f :
       {"spec.worker.gpus", "spec.worker.rdma.count", "spec.sidecar.engine.fusionThresholdBytes",
        "spec.runPolicy.backoffLimit", "spec.runPolicy.ttlSecondsAfterFinished"}) {
    EXPECT_EQ(Field(f)["minimum"], 0) << f;
  }
  EXPECT_EQ(Field("spec.sidecar.engine.cycleTimeMs")["minimum"], 0);
  EXPECT_EQ(Field("spec.sidecar.engine.cycleTimeMs")["exclusiveMinimum"], true);
  EXPECT_EQ(Field("spec.template.spec.containers")["minItems"], 1);
}

TEST_F(CrdSchema, RequiredMatch) {
  EXPECT_EQ(Field("spec")["required"], json::array({"replicas", "template", "sidecar"}));
  EXPECT_EQ(Field("spec.sidecar")["required"], json::array({"image"}));
  EXPECT_EQ(Field("status.conditions")["x-kubernetes-list-map-keys"], json::array({"type"}));
  EXPECT_EQ(Field("status.conditions")["x-kubernetes-list-type"], "map");
}

// Every field FromJson reads is in the schema, and every schema field is read: build an object
// with all schema leaves from the CRD and check FromJson accepts it (it rejects unknown fields).
TEST_F(CrdSchema, EverySpecFieldIsKnownToFromJson) {
  std::function<json(const json&)> example = [&](const json& s) -> json {
    const std::string type = s.value("type", "");
    if (s.contains("enum")) return s["enum"][0];
    if (s.contains("example")) return s["example"];  // a string with a pattern
    if (type == "object") {
      json o = json::object();
      if (s.contains("properties")) {
        for (const auto& [k, v] : s["properties"].items()) o[k] = example(v);
      }
      return o;
    }
    if (type == "array") return json::array({example(s["items"])});
    if (type == "integer") return s.value("minimum", json(1)).get<int64_t>() + 1;
    if (type == "number") return 1.5;
    if (type == "boolean") return false;
    if (type == "string")
      return s.value("format", "") == "date-time" ? "2026-01-01T00:00:00Z" : "x";
    return nullptr;
  };
  json j = MinimalJob();
  j["spec"] = example(Field("spec"));
  j["status"] = example(Field("status"));
  auto job = HorovodJobFromJson(j);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
}

// --- samples -----------------------------------------------------------------------------

class Sample : public ::testing::TestWithParam<const char*> {};

TEST_P(Sample, ParsesAndValidates) {
  json j = LoadYamlFileAsJson(kSourceDir + "/crds/samples/" + GetParam());
  auto job = HorovodJobFromJson(j);
  ASSERT_TRUE(job.ok()) << GetParam() << ": " << job.status().ToString();
  Verdict v = Validate(job->metadata.name, job->spec);
  EXPECT_TRUE(v.ok()) << v.reason << ": " << v.message;
}

INSTANTIATE_TEST_SUITE_P(Crds, Sample,
                         ::testing::Values("cpu-job.yaml", "gpu-rdma-job.yaml", "gang-job.yaml",
                                           "gang-cpu-job.yaml"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           n = n.substr(0, n.find('.'));
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

TEST(Samples, GpuRdmaValues) {
  auto job = HorovodJobFromJson(LoadYamlFileAsJson(kSourceDir + "/crds/samples/gpu-rdma-job.yaml"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->spec.worker.gpus, 8);
  EXPECT_EQ(job->spec.worker.rdma.count, 1);
  EXPECT_DOUBLE_EQ(*job->spec.sidecar.engine.cycle_time_ms, 3.5);
  EXPECT_EQ(job->spec.pod_template["spec"]["containers"][0]["command"][3], "90");  // quoted
  EXPECT_EQ(job->spec.run_policy.clean_pod_policy, CleanPodPolicy::kAll);
}

}  // namespace
}  // namespace korovod::k8s_operator
