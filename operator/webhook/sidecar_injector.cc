#include "operator/webhook/sidecar_injector.h"

#include <charconv>
#include <cmath>
#include <optional>

#include "common/base64.h"
#include "common/byte_count.h"
#include "operator/api/types.h"
#include "operator/api/validate.h"
#include "operator/controller/worker_pod_builder.h"

namespace korovod::k8s_operator {
namespace {

// JSON nesting an AdmissionReview may have: a pod's spec is about 10 deep; 64 leaves room for
// any real value (annotations, CRD-style env) and keeps every walk over the review shallow.
constexpr int kMaxReviewDepth = 64;

using nlohmann::json;

const json& Member(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string StringMember(const json& object, const char* key) {
  const json& v = Member(object, key);
  return v.is_string() ? v.get<std::string>() : "";
}

std::optional<std::string> Annotation(const json& pod, std::string_view key) {
  const json& annotations = Member(Member(pod, "metadata"), "annotations");
  const json& v = Member(annotations, std::string(key).c_str());
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

std::string Label(const json& pod, std::string_view key) {
  return StringMember(Member(Member(pod, "metadata"), "labels"), std::string(key).c_str());
}

std::optional<int64_t> ParseNonNegative(const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

// The workload that created the pod, its kind, and the pod's rank in it.
struct Placement {
  std::string kind;  // "StatefulSet" or "Job"
  std::string workload;
  int64_t rank = 0;
};

std::optional<Placement> FindPlacement(const json& pod, std::string* denial) {
  const json& meta = Member(pod, "metadata");
  for (const json& owner : Member(meta, "ownerReferences")) {
    const std::string kind = StringMember(owner, "kind");
    const std::string name = StringMember(owner, "name");
    if (kind == "StatefulSet") {
      std::string index = Label(pod, "apps.kubernetes.io/pod-index");
      const std::string pod_name = StringMember(meta, "name");
      if (index.empty() && pod_name.rfind(name + "-", 0) == 0) {
        index = pod_name.substr(name.size() + 1);
      }
      std::optional<int64_t> rank = ParseNonNegative(index);
      if (!rank) {
        *denial = "StatefulSet " + name + " pod: cannot read its ordinal (label " +
                  "apps.kubernetes.io/pod-index or the name's suffix)";
        return std::nullopt;
      }
      return Placement{kind, name, *rank};
    }
    if (kind == "Job") {
      std::optional<std::string> index =
          Annotation(pod, "batch.kubernetes.io/job-completion-index");
      if (!index) {
        *denial = "Job " + name + " pod: no completion index; only Indexed Jobs " +
                  "(completionMode: Indexed) give each pod a rank";
        return std::nullopt;
      }
      std::optional<int64_t> rank = ParseNonNegative(*index);
      if (!rank) {
        *denial = "Job " + name + " pod: completion index \"" + *index + "\" is not a number";
        return std::nullopt;
      }
      return Placement{kind, name, *rank};
    }
  }
  *denial =
      "cannot determine the rank: korovod injects pods of a StatefulSet (rank = ordinal) "
      "or of an Indexed Job (rank = completion index); for other pods use a HorovodJob";
  return std::nullopt;
}

bool AlreadyInjected(const json& spec) {
  for (const json& c : Member(spec, "initContainers")) {
    if (StringMember(c, "name") == kSidecarContainerName) return true;
  }
  return false;
}

// The sidecar settings a HorovodJob would carry, from the pod's annotations.
std::optional<HorovodJobSpec> SpecFromAnnotations(const json& pod, int64_t size,
                                                  const OperatorSettings& settings,
                                                  std::string* denial) {
  HorovodJobSpec spec;
  spec.replicas = size;
  spec.sidecar.image =
      Annotation(pod, kSidecarImageAnnotation).value_or(settings.default_sidecar_image);
  if (spec.sidecar.image.empty()) {
    *denial = std::string(kSidecarImageAnnotation) + " is empty";
    return std::nullopt;
  }
  json requests = json::object();
  if (auto cpu = Annotation(pod, kSidecarCpuAnnotation)) requests["cpu"] = *cpu;
  if (auto mem = Annotation(pod, kSidecarMemoryAnnotation)) requests["memory"] = *mem;
  if (!requests.empty()) spec.sidecar.resources = {{"requests", requests}};
  if (auto v = Annotation(pod, kFusionThresholdAnnotation)) {
    StatusOr<int64_t> bytes = ParseByteCount(*v);  // exactly as the engine reads the variable
    if (!bytes.ok()) {
      *denial = std::string(kFusionThresholdAnnotation) + "=\"" + *v +
                "\" is not a byte size (e.g. 67108864 or 64M; K, M, G are binary): " +
                bytes.status().message();
      return std::nullopt;
    }
    spec.sidecar.engine.fusion_threshold_bytes = *bytes;
  }
  if (auto v = Annotation(pod, kCycleTimeAnnotation)) {
    char* end = nullptr;
    const double ms = std::strtod(v->c_str(), &end);
    if (v->empty() || end != v->c_str() + v->size() || !std::isfinite(ms) || ms <= 0) {
      *denial = std::string(kCycleTimeAnnotation) + "=\"" + *v +
                "\" is not a positive number of milliseconds";
      return std::nullopt;
    }
    spec.sidecar.engine.cycle_time_ms = ms;
  }
  if (auto v = Annotation(pod, kTimelineAnnotation)) spec.sidecar.engine.timeline = *v;
  if (auto v = Annotation(pod, kInterfaceAnnotation)) spec.networking.interface_name = *v;
  if (auto v = Annotation(pod, kSidecarEnvAnnotation)) {
    size_t i = 0;
    while (i < v->size()) {
      const size_t end = v->find_first_of(" ,\n\t", i);
      const std::string item = v->substr(i, end == std::string::npos ? std::string::npos : end - i);
      i = end == std::string::npos ? v->size() : end + 1;
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      if (eq == std::string::npos) {
        *denial = std::string(kSidecarEnvAnnotation) + ": \"" + item +
                  "\" is not NAME=value (e.g. KOROVOD_AUTOTUNE=1)";
        return std::nullopt;
      }
      spec.sidecar.env.push_back({item.substr(0, eq), item.substr(eq + 1)});
    }
    const Verdict v_env = ValidateSidecarEnv(spec.sidecar.env, kSidecarEnvAnnotation);
    if (!v_env.ok()) {
      *denial = v_env.message;
      return std::nullopt;
    }
  }
  return spec;
}

}  // namespace

InjectionPlan PlanInjection(json pod, const std::string& ns, const OperatorSettings& settings) {
  InjectionPlan plan;
  if (!pod.is_object() || !Member(pod, "spec").is_object()) {
    plan.denial = "the review's object is not a Pod with a spec";
    return plan;
  }
  if (Label(pod, kInjectLabel) == "false") {
    plan.why = "opted out (" + std::string(kInjectLabel) + "=false)";
    return plan;
  }
  const json& pod_spec = Member(pod, "spec");
  if (AlreadyInjected(pod_spec)) {
    plan.why = "already has " + std::string(kSidecarContainerName);
    return plan;
  }
  // A pod labelled inject=true asked for the sidecar: anything missing is a denial. A pod that
  // is here only because its namespace opted in is a training pod only if it names its world.
  std::optional<std::string> size_text = Annotation(pod, kWorldSizeAnnotation);
  if (Label(pod, kInjectLabel) != "true" && !size_text) {
    plan.why = "namespace opt-in, but the pod has no " + std::string(kWorldSizeAnnotation) +
               " annotation (not a training pod)";
    return plan;
  }
  std::optional<Placement> placement = FindPlacement(pod, &plan.denial);
  if (!placement) return plan;

  std::optional<int64_t> size = size_text ? ParseNonNegative(*size_text) : std::nullopt;
  if (!size || *size < 1) {
    plan.denial = placement->kind + " " + placement->workload + ": set the pod template's " +
                  "annotation " + std::string(kWorldSizeAnnotation) + " to the number of ranks (" +
                  (size_text ? "\"" + *size_text + "\" is not a positive integer" : "missing") +
                  ")";
    return plan;
  }
  if (placement->rank >= *size) {
    plan.denial = placement->kind + " " + placement->workload + ": rank " +
                  std::to_string(placement->rank) + " is outside the world of " +
                  std::to_string(*size) + " (" + std::string(kWorldSizeAnnotation) + ")";
    return plan;
  }
  const std::string subdomain = StringMember(pod_spec, "subdomain");
  if (subdomain.empty()) {
    plan.denial = placement->kind + " " + placement->workload +
                  ": the pod has no spec.subdomain, so rank 0 has no DNS name; set " +
                  (placement->kind == "StatefulSet" ? "the StatefulSet's serviceName"
                                                    : "spec.template.spec.subdomain") +
                  " to a headless Service selecting these pods";
    return plan;
  }
  std::optional<HorovodJobSpec> spec = SpecFromAnnotations(pod, *size, settings, &plan.denial);
  if (!spec) return plan;
  HorovodJob as_job;
  as_job.spec = std::move(*spec);
  // The pod's spec is moved, never copied: a copy of a JSON value recurses once per level of
  // nesting, and this is the one place the whole pod passes through (issue 31).
  const bool host_network = Member(pod_spec, "hostNetwork") == json(true);
  as_job.spec.pod_template = json::object();
  as_job.spec.pod_template["spec"] = std::move(pod["spec"]);
  const int trainer = TrainerContainerIndex(as_job.spec);
  if (trainer < 0) {
    plan.denial = "cannot tell which container is the trainer: name it \"" +
                  std::string(kTrainerContainerName) + "\" (the pod has several containers)";
    return plan;
  }

  WorkerIdentity id;
  id.rank = placement->rank;
  id.size = *size;
  id.index = placement->rank;  // one rank per pod: torchrun's GROUP_RANK
  id.workers = *size;
  id.host_network = host_network;
  const std::string world_id = ns + "/" + placement->kind + "/" + placement->workload;
  id.ports = PortsFor(world_id, id.rank, id.host_network, settings);
  id.coordinator = placement->workload + "-0." + subdomain + "." + ns + ".svc." +
                   settings.cluster_domain + ":" +
                   std::to_string(PortsFor(world_id, 0, id.host_network, settings).coordinator);
  id.key_secret = Annotation(pod, kJobKeySecretAnnotation)
                      .value_or(placement->workload + std::string(kJobKeySecretSuffix));
  id.shm_prefix = "/korovod-" + placement->workload + "-" + std::to_string(placement->rank) + "-";
  id.start_timeout_seconds = as_job.spec.run_policy.startup_timeout_seconds;

  json configured = std::move(as_job.spec.pod_template["spec"]);
  ConfigureWorkerPodSpec(configured, trainer, as_job.spec, id, settings);
  // ConfigureWorkerPodSpec always sets these four (the sidecar, its volumes, the trainer's
  // environment, the sidecar's supplemental group), and "add" replaces an existing member (RFC
  // 6902 4.1): one operation each, their values moved into the patch rather than compared with a
  // copy of the original. automountServiceAccountToken is the workload's own choice: by admission
  // time the API server has already mounted the token (or not), so the webhook leaves it alone.
  for (const char* key : {"containers", "initContainers", "volumes", "securityContext"}) {
    auto it = configured.find(key);
    if (it == configured.end()) continue;
    json op = json::object();
    op["op"] = "add";
    op["path"] = std::string("/spec/") + key;
    op["value"] = std::move(*it);
    plan.patch.push_back(std::move(op));
  }
  plan.why = placement->kind + " " + ns + "/" + placement->workload + " rank " +
             std::to_string(id.rank) + " of " + std::to_string(id.size);
  return plan;
}

AdmissionReply ReviewPodCreation(std::string_view request_body, const OperatorSettings& settings) {
  AdmissionReply reply;
  // Deeper values are dropped while parsing (the parser keeps its own stack), so nothing built
  // from the review recurses that deep: a pod's spec nested 100,000 levels once crashed the
  // operator (issue 31). No real pod comes near the limit.
  bool too_deep = false;
  json review = json::parse(
      request_body,
      [&too_deep](int depth, json::parse_event_t, json&) {
        if (depth > kMaxReviewDepth) too_deep = true;
        return depth <= kMaxReviewDepth;
      },
      /*allow_exceptions=*/false);
  if (too_deep) {
    reply.http_status = 400;
    reply.body = {{"error", "the AdmissionReview is nested deeper than " +
                                std::to_string(kMaxReviewDepth) + " levels"}};
    reply.log = "rejected an AdmissionReview nested deeper than " +
                std::to_string(kMaxReviewDepth) + " levels";
    reply.outcome = "error";
    return reply;
  }
  json no_request;
  json& request = review.is_object() && review.contains("request") ? review["request"] : no_request;
  const std::string uid = StringMember(request, "uid");
  if (review.is_discarded() || StringMember(review, "kind") != "AdmissionReview" || uid.empty()) {
    reply.http_status = 400;
    reply.body = {{"error", "expected an admission.k8s.io/v1 AdmissionReview with request.uid"}};
    reply.log = "rejected a request that is not an AdmissionReview";
    reply.outcome = "error";
    return reply;
  }
  json response = {{"uid", uid}, {"allowed", true}};
  const json& kind = Member(request, "kind");
  if (StringMember(kind, "kind") != "Pod" || StringMember(request, "operation") != "CREATE") {
    reply.log = "review " + uid + ": not a Pod CREATE; allowed unchanged";
    reply.outcome = "unchanged";
  } else {
    InjectionPlan plan;
    try {
      // The pod is moved out of the review (the review itself is not needed again).
      json pod =
          request.is_object() && request.contains("object") ? std::move(request["object"]) : json();
      plan = PlanInjection(std::move(pod), StringMember(request, "namespace"), settings);
    } catch (const nlohmann::json::exception& e) {
      // A field of an unexpected type deep in the pod (the API server validates pods after
      // mutating admission, so the webhook sees them raw).
      plan = InjectionPlan{};
      plan.denial = std::string("the pod is malformed: ") + e.what();
    }
    if (!plan.denial.empty()) {
      response["allowed"] = false;
      response["status"] = {{"code", 403},
                            {"reason", "Forbidden"},
                            {"message", "korovod sidecar injection: " + plan.denial}};
      reply.log = "review " + uid + ": denied: " + plan.denial;
      reply.outcome = "denied";
    } else {
      if (!plan.patch.empty()) {
        response["patchType"] = "JSONPatch";
        response["patch"] = Base64Encode(plan.patch.dump());
      }
      reply.log =
          "review " + uid + ": " + (plan.patch.empty() ? "unchanged: " : "injected: ") + plan.why;
      reply.outcome = plan.patch.empty() ? "unchanged" : "injected";
    }
  }
  reply.body = {{"apiVersion", "admission.k8s.io/v1"},
                {"kind", "AdmissionReview"},
                {"response", std::move(response)}};
  return reply;
}

}  // namespace korovod::k8s_operator
