// The injection webhook's decision: which pods get the sidecar, with which rank and world, and
// the clear denials for pods whose rank or size cannot be known.
#include "operator/webhook/sidecar_injector.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/base64.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

json StatefulSetPod(int ordinal, int size = 4) {
  return json::parse(R"({
    "metadata": {
      "name": "bert-)" +
                     std::to_string(ordinal) + R"(",
      "labels": {"korovod.dev/inject": "true", "apps.kubernetes.io/pod-index": ")" +
                     std::to_string(ordinal) + R"("},
      "annotations": {"korovod.dev/world-size": ")" +
                     std::to_string(size) + R"("},
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "bert",
                           "uid": "u", "controller": true}]
    },
    "spec": {
      "hostname": "bert-)" +
                     std::to_string(ordinal) + R"(",
      "subdomain": "bert-workers",
      "containers": [{"name": "main", "image": "trainer:1",
                      "env": [{"name": "EPOCHS", "value": "3"}]}]
    }
  })");
}

json Review(const json& pod, const std::string& operation = "CREATE") {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "abc-123"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"operation", operation},
            {"namespace", "ml"},
            {"object", pod}}}};
}

const json* Named(const json& list, const std::string& name) {
  for (const json& item : list) {
    if (item.value("name", "") == name) return &item;
  }
  return nullptr;
}

std::string EnvValue(const json& container, const std::string& name) {
  const json* e = Named(container["env"], name);
  return e == nullptr ? "<unset>" : e->value("value", "<ref>");
}

// Applies the "add" operations of a JSON Patch on /spec/<field> (all the injector emits).
json Apply(json pod, const json& patch) {
  for (const json& operation : patch) {
    EXPECT_EQ(operation["op"], "add");
    const std::string path = operation["path"];
    EXPECT_EQ(path.rfind("/spec/", 0), 0u) << path;
    pod["spec"][path.substr(6)] = operation["value"];
  }
  return pod;
}

TEST(SidecarInjector, StatefulSetPodIsWiredLikeAHorovodJobWorker) {
  OperatorSettings settings;
  const InjectionPlan plan = PlanInjection(StatefulSetPod(2), "ml", settings);
  ASSERT_TRUE(plan.denial.empty()) << plan.denial;
  EXPECT_EQ(plan.why, "StatefulSet ml/bert rank 2 of 4");
  const json pod = Apply(StatefulSetPod(2), plan.patch);
  const json& trainer = pod["spec"]["containers"][0];
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_RANK"), "2");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_SIZE"), "4");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_COORDINATOR"),
            "bert-0.bert-workers.ml.svc.cluster.local:28500");
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_SOCKET"), "/var/run/korovod/sidecar.sock");
  EXPECT_EQ(EnvValue(trainer, "EPOCHS"), "3");               // the template's own env stays
  EXPECT_EQ(EnvValue(trainer, "KOROVOD_EPOCH"), "<unset>");  // HorovodJob pods only
  const json& sidecar = pod["spec"]["initContainers"][0];
  EXPECT_EQ(sidecar["name"], "korovod-sidecar");
  EXPECT_EQ(sidecar["restartPolicy"], "Always");
  EXPECT_EQ(sidecar["image"], settings.default_sidecar_image);
  EXPECT_EQ(EnvValue(sidecar, "KOROVOD_SHM_PREFIX"), "/korovod-bert-2-");
  EXPECT_EQ((*Named(sidecar["env"], "KOROVOD_JOB_KEY"))["valueFrom"]["secretKeyRef"]["name"],
            "bert-korovod-key");
  EXPECT_NE(Named(pod["spec"]["volumes"], "korovod-socket"), nullptr);
  EXPECT_NE(Named(pod["spec"]["volumes"], "dshm"), nullptr);
}

// An injected pod gets torchrun's variables too, so a torch.distributed script with
// init_process_group("korovod") runs in a StatefulSet as in a HorovodJob; the user's own stay.
TEST(SidecarInjector, TrainerGetsTorchrunsVariables) {
  json original = StatefulSetPod(2);
  original["spec"]["containers"][0]["env"].push_back({{"name", "MASTER_PORT"}, {"value", "1234"}});
  const InjectionPlan plan = PlanInjection(original, "ml", OperatorSettings{});
  ASSERT_TRUE(plan.denial.empty()) << plan.denial;
  const json pod = Apply(original, plan.patch);
  const json& trainer = pod["spec"]["containers"][0];
  EXPECT_EQ(EnvValue(trainer, "RANK"), "2");
  EXPECT_EQ(EnvValue(trainer, "WORLD_SIZE"), "4");
  EXPECT_EQ(EnvValue(trainer, "LOCAL_RANK"), "0");
  EXPECT_EQ(EnvValue(trainer, "LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(EnvValue(trainer, "GROUP_RANK"), "2");
  EXPECT_EQ(EnvValue(trainer, "MASTER_ADDR"), "bert-0.bert-workers.ml.svc.cluster.local");
  EXPECT_EQ(EnvValue(trainer, "MASTER_PORT"), "1234");
  EXPECT_EQ(EnvValue(pod["spec"]["initContainers"][0], "RANK"), "<unset>");
}

TEST(SidecarInjector, InjectionIsIdempotent) {
  OperatorSettings settings;
  const json once =
      Apply(StatefulSetPod(1), PlanInjection(StatefulSetPod(1), "ml", settings).patch);
  const InjectionPlan again = PlanInjection(once, "ml", settings);
  EXPECT_TRUE(again.denial.empty());
  EXPECT_TRUE(again.patch.empty());
  EXPECT_EQ(again.why, "already has korovod-sidecar");
}

TEST(SidecarInjector, OptedOutPodIsLeftAlone) {
  json pod = StatefulSetPod(0);
  pod["metadata"]["labels"]["korovod.dev/inject"] = "false";
  const InjectionPlan plan = PlanInjection(pod, "ml", OperatorSettings{});
  EXPECT_TRUE(plan.denial.empty());
  EXPECT_TRUE(plan.patch.empty());
}

TEST(SidecarInjector, FusionThresholdTakesTheEngineSuffixes) {
  json pod = StatefulSetPod(0);
  pod["metadata"]["annotations"]["korovod.dev/fusion-threshold-bytes"] = "32M";
  const InjectionPlan plan = PlanInjection(pod, "ml", OperatorSettings{});
  ASSERT_TRUE(plan.denial.empty()) << plan.denial;
  const json injected = Apply(pod, plan.patch);
  EXPECT_EQ(EnvValue(injected["spec"]["initContainers"][0], "KOROVOD_FUSION_THRESHOLD"),
            "33554432");
  // The engine's own parser: its other spellings pass, and what the sidecar would refuse at
  // start (over 1 TiB) is denied at admission instead.
  pod["metadata"]["annotations"]["korovod.dev/fusion-threshold-bytes"] = "2GiB";
  EXPECT_TRUE(PlanInjection(pod, "ml", OperatorSettings{}).denial.empty());
  pod["metadata"]["annotations"]["korovod.dev/fusion-threshold-bytes"] = "1025G";
  EXPECT_NE(PlanInjection(pod, "ml", OperatorSettings{}).denial.find("larger than 1 TiB"),
            std::string::npos);
}

TEST(SidecarInjector, SidecarEnvAnnotationReachesTheSidecar) {
  json pod = StatefulSetPod(0);
  pod["metadata"]["annotations"]["korovod.dev/sidecar-env"] =
      "KOROVOD_AUTOTUNE=1, KOROVOD_STALL_CHECK_TIME_SECONDS=30\nHOROVOD_AUTOTUNE_LOG=/tmp/a.csv";
  const InjectionPlan plan = PlanInjection(pod, "ml", OperatorSettings{});
  ASSERT_TRUE(plan.denial.empty()) << plan.denial;
  const json sidecar = Apply(pod, plan.patch)["spec"]["initContainers"][0];
  EXPECT_EQ(EnvValue(sidecar, "KOROVOD_AUTOTUNE"), "1");
  EXPECT_EQ(EnvValue(sidecar, "KOROVOD_STALL_CHECK_TIME_SECONDS"), "30");
  EXPECT_EQ(EnvValue(sidecar, "HOROVOD_AUTOTUNE_LOG"), "/tmp/a.csv");
}

// A namespace label brings every new pod of the namespace here; only those that name their world
// are training pods. A pod labelled inject=true asked explicitly, so it is denied instead.
TEST(SidecarInjector, NamespaceOptInSkipsPodsWithoutAWorldSize) {
  json helper = StatefulSetPod(0);
  helper["metadata"]["labels"].erase("korovod.dev/inject");
  helper["metadata"]["annotations"].erase("korovod.dev/world-size");
  helper["metadata"].erase("ownerReferences");
  const InjectionPlan skipped = PlanInjection(helper, "ml", OperatorSettings{});
  EXPECT_TRUE(skipped.denial.empty()) << skipped.denial;
  EXPECT_TRUE(skipped.patch.empty());
  EXPECT_NE(skipped.why.find("namespace opt-in"), std::string::npos) << skipped.why;

  json unranked = helper;
  unranked["metadata"]["annotations"]["korovod.dev/world-size"] = "4";
  EXPECT_NE(PlanInjection(unranked, "ml", OperatorSettings{}).denial.find("cannot determine"),
            std::string::npos);

  json trainer = StatefulSetPod(1);
  trainer["metadata"]["labels"].erase("korovod.dev/inject");
  EXPECT_FALSE(PlanInjection(trainer, "ml", OperatorSettings{}).patch.empty());
}

TEST(SidecarInjector, IndexedJobPodTakesItsCompletionIndex) {
  json pod = json::parse(R"({
    "metadata": {"generateName": "train-1-",
                 "labels": {"korovod.dev/inject": "true"},
                 "annotations": {"korovod.dev/world-size": "2",
                                 "batch.kubernetes.io/job-completion-index": "1",
                                 "korovod.dev/sidecar-image": "reg/sidecar:9",
                                 "korovod.dev/cycle-time-ms": "2.5",
                                 "korovod.dev/interface": "eth1",
                                 "korovod.dev/job-key-secret": "my-key"},
                 "ownerReferences": [{"kind": "Job", "name": "train", "uid": "u"}]},
    "spec": {"hostname": "train-1", "subdomain": "train-svc",
             "containers": [{"name": "sidecar-logger", "image": "l"},
                            {"name": "trainer", "image": "t"}]}
  })");
  const InjectionPlan plan = PlanInjection(pod, "ml", OperatorSettings{});
  ASSERT_TRUE(plan.denial.empty()) << plan.denial;
  const json injected = Apply(pod, plan.patch);
  EXPECT_EQ(EnvValue(injected["spec"]["containers"][1], "KOROVOD_RANK"), "1");
  EXPECT_EQ(EnvValue(injected["spec"]["containers"][1], "KOROVOD_COORDINATOR"),
            "train-0.train-svc.ml.svc.cluster.local:28500");
  EXPECT_EQ(injected["spec"]["containers"][0].count("env"), 0u);  // only the trainer is configured
  const json& sidecar = injected["spec"]["initContainers"][0];
  EXPECT_EQ(sidecar["image"], "reg/sidecar:9");
  EXPECT_EQ(EnvValue(sidecar, "KOROVOD_CYCLE_TIME"), "2.5");
  EXPECT_EQ(EnvValue(sidecar, "KOROVOD_IFACE"), "eth1");
  EXPECT_EQ((*Named(sidecar["env"], "KOROVOD_JOB_KEY"))["valueFrom"]["secretKeyRef"]["name"],
            "my-key");
}

TEST(SidecarInjector, DenialsNameWhatIsMissing) {
  struct Case {
    std::string what;
    std::function<void(json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"no size", [](json& p) { p["metadata"]["annotations"].erase("korovod.dev/world-size"); },
       "korovod.dev/world-size to the number of ranks (missing)"},
      {"bad size", [](json& p) { p["metadata"]["annotations"]["korovod.dev/world-size"] = "x"; },
       "\"x\" is not a positive integer"},
      {"rank outside",
       [](json& p) { p["metadata"]["annotations"]["korovod.dev/world-size"] = "2"; },
       "rank 2 is outside the world of 2"},
      {"no owner", [](json& p) { p["metadata"].erase("ownerReferences"); },
       "cannot determine the rank"},
      {"no subdomain", [](json& p) { p["spec"].erase("subdomain"); },
       "the StatefulSet's serviceName"},
      {"two containers",
       [](json& p) {
         p["spec"]["containers"].push_back({{"name", "other"}, {"image", "o"}});
       },
       "name it \"trainer\""},
      {"bad fusion",
       [](json& p) { p["metadata"]["annotations"]["korovod.dev/fusion-threshold-bytes"] = "-1"; },
       "korovod.dev/fusion-threshold-bytes=\"-1\""},
      {"env without =",
       [](json& p) {
         p["metadata"]["annotations"]["korovod.dev/sidecar-env"] = "KOROVOD_AUTOTUNE";
       },
       "korovod.dev/sidecar-env: \"KOROVOD_AUTOTUNE\" is not NAME=value"},
      {"env reserved",
       [](json& p) { p["metadata"]["annotations"]["korovod.dev/sidecar-env"] = "KOROVOD_SIZE=9"; },
       "korovod.dev/sidecar-env[0] KOROVOD_SIZE: set by the operator"},
      {"fusion suffix",
       [](json& p) { p["metadata"]["annotations"]["korovod.dev/fusion-threshold-bytes"] = "64T"; },
       "is not a byte size"},
  };
  for (const Case& c : cases) {
    json pod = StatefulSetPod(2);
    c.edit(pod);
    const InjectionPlan plan = PlanInjection(pod, "ml", OperatorSettings{});
    EXPECT_NE(plan.denial.find(c.expect), std::string::npos) << c.what << ": " << plan.denial;
    EXPECT_TRUE(plan.patch.empty()) << c.what;
  }
}

TEST(SidecarInjector, ReviewResponseCarriesTheUidAndABase64Patch) {
  const AdmissionReply reply = ReviewPodCreation(Review(StatefulSetPod(0)).dump(), {});
  EXPECT_EQ(reply.http_status, 200);
  const json& response = reply.body["response"];
  EXPECT_EQ(reply.body["kind"], "AdmissionReview");
  EXPECT_EQ(response["uid"], "abc-123");
  EXPECT_EQ(response["allowed"], true);
  EXPECT_EQ(response["patchType"], "JSONPatch");
  EXPECT_NE(reply.log.find("injected: StatefulSet ml/bert rank 0 of 4"), std::string::npos);
  // The patch decodes to the plan's ops.
  const json expected = PlanInjection(StatefulSetPod(0), "ml", {}).patch;
  EXPECT_EQ(response["patch"], Base64Encode(expected.dump()));
}

TEST(SidecarInjector, DenialIsAnAnsweredReview) {
  json pod = StatefulSetPod(0);
  pod["metadata"]["annotations"].erase("korovod.dev/world-size");
  const AdmissionReply reply = ReviewPodCreation(Review(pod).dump(), {});
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.body["response"]["allowed"], false);
  EXPECT_EQ(reply.body["response"]["status"]["code"], 403);
  const std::string message = reply.body["response"]["status"]["message"];
  EXPECT_EQ(message.rfind("korovod sidecar injection: StatefulSet bert", 0), 0u) << message;
}

TEST(SidecarInjector, MalformedReviewsGetA400AndNeverThrow) {
  for (const std::string& body : {std::string(""), std::string("{"), std::string("[]"),
                                  std::string("null"), std::string(R"({"kind":"AdmissionReview"})"),
                                  std::string(R"({"kind":"AdmissionReview","request":{"uid":7}})"),
                                  std::string(R"({"kind":"Pod","request":{"uid":"u"}})")}) {
    const AdmissionReply reply = ReviewPodCreation(body, {});
    EXPECT_EQ(reply.http_status, 400) << body;
  }
  // A review with a uid but an object that is not a pod: answered, denied.
  json review = Review(json("not a pod"));
  const AdmissionReply reply = ReviewPodCreation(review.dump(), {});
  EXPECT_EQ(reply.http_status, 200);
  EXPECT_EQ(reply.body["response"]["allowed"], false);
  // Other operations and kinds pass unchanged.
  const AdmissionReply update = ReviewPodCreation(Review(StatefulSetPod(0), "UPDATE").dump(), {});
  EXPECT_EQ(update.body["response"]["allowed"], true);
  EXPECT_FALSE(update.body["response"].contains("patch"));
}

// Issue 31: a pod that opts in with a value nested 100,000 levels deep in its spec killed the
// operator (SIGSEGV). The review is refused with a 400 naming the depth; nothing recurses.
TEST(SidecarInjector, ADeeplyNestedReviewIsRefusedNotACrash) {
  json pod = StatefulSetPod(0);
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  std::string body = Review(pod).dump();
  const std::string marker = "\"spec\":{";
  const size_t at = body.find(marker);
  ASSERT_NE(at, std::string::npos);
  body.insert(at + marker.size(), "\"deep\":" + deep + ",");
  const AdmissionReply reply = ReviewPodCreation(body, {});
  EXPECT_EQ(reply.http_status, 400);
  EXPECT_NE(reply.body.dump().find("nested deeper than"), std::string::npos) << reply.body.dump();
  // A thousand levels, as deep as anything real, is still only JSON: answered.
  std::string shallow = Review(pod).dump();
  shallow.insert(shallow.find(marker) + marker.size(),
                 "\"deep\":" + std::string(50, '[') + std::string(50, ']') + ",");
  EXPECT_EQ(ReviewPodCreation(shallow, {}).http_status, 200);
}

}  // namespace
}  // namespace korovod::k8s_operator
