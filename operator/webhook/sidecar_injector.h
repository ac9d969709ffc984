// The sidecar injection webhook's decision, as a pure function: an AdmissionReview for a Pod
// CREATE in, an AdmissionReview response out (a JSON Patch that configures the pod exactly as the
// operator configures a HorovodJob worker, an empty patch, or a denial naming what is missing).
// No I/O: the HTTPS server around it lives in webhook_server.h. Rules: docs/adr/0009.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "operator/controller/operator_settings.h"

namespace korovod::k8s_operator {

inline constexpr std::string_view kInjectLabel = "korovod.dev/inject";
inline constexpr std::string_view kWorldSizeAnnotation = "korovod.dev/world-size";
inline constexpr std::string_view kJobKeySecretAnnotation = "korovod.dev/job-key-secret";
inline constexpr std::string_view kSidecarImageAnnotation = "korovod.dev/sidecar-image";
inline constexpr std::string_view kSidecarCpuAnnotation = "korovod.dev/sidecar-cpu";
inline constexpr std::string_view kSidecarMemoryAnnotation = "korovod.dev/sidecar-memory";
inline constexpr std::string_view kFusionThresholdAnnotation = "korovod.dev/fusion-threshold-bytes";
inline constexpr std::string_view kCycleTimeAnnotation = "korovod.dev/cycle-time-ms";
inline constexpr std::string_view kTimelineAnnotation = "korovod.dev/timeline";
inline constexpr std::string_view kInterfaceAnnotation = "korovod.dev/interface";
// More engine variables: "KOROVOD_AUTOTUNE=1 KOROVOD_STALL_CHECK_TIME_SECONDS=30" (separated by
// spaces, commas or newlines), as spec.sidecar.env.
inline constexpr std::string_view kSidecarEnvAnnotation = "korovod.dev/sidecar-env";
inline constexpr std::string_view kJobKeySecretSuffix = "-korovod-key";

// What to do with one pod. `denial` non-empty: reject with that message. Else `patch` (a JSON
// Patch array, possibly empty) and `why` (for the log: which workload and rank, or why nothing).
struct InjectionPlan {
  std::string denial;
  nlohmann::json patch = nlohmann::json::array();
  std::string why;
};

// `pod` as in the review's request.object (taken by value: callers move it in, and its spec is
// moved into the patch, so no part of the pod is deep-copied); `ns` the request's namespace.
InjectionPlan PlanInjection(nlohmann::json pod, const std::string& ns,
                            const OperatorSettings& settings);

struct AdmissionReply {
  int http_status = 200;               // 400: not an AdmissionReview we can answer at all
  nlohmann::json body;                 // the AdmissionReview response, or {"error": ...} with 400
  std::string log;                     // one line for the operator's log
  std::string_view outcome = "error";  // "injected", "unchanged", "denied" or "error" (metrics)
};

AdmissionReply ReviewPodCreation(std::string_view request_body, const OperatorSettings& settings);

}  // namespace korovod::k8s_operator
