// The injection webhook's AdmissionReview decoding and injection planning (ReviewPodCreation),
// as the operator runs it on a POST /inject body: any pod that can reach the webhook Service
// sends these bytes (issue 31: a review nested 100,000 levels deep once crashed the operator).
// Every body gets an answer: 400 with an error, or 200 with an AdmissionReview response for the
// request's uid; an allowed answer's patch is base64 of a JSON Patch that applies to the pod it
// was planned for, and leaves the sidecar in it; a denial carries a message.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/base64.h"
#include "operator/api/types.h"
#include "operator/webhook/sidecar_injector.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;
using namespace korovod::k8s_operator;
using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const OperatorSettings settings = [] {
    OperatorSettings s;
    s.default_sidecar_image = "korovod/sidecar:fuzz";
    return s;
  }();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  AdmissionReply reply = ReviewPodCreation(body, settings);
  const std::string text = reply.body.dump();  // what the server sends; must not throw
  FUZZ_CHECK(!text.empty());
  FUZZ_CHECK(!reply.log.empty());
  if (reply.http_status == 400) {
    FUZZ_CHECK(reply.outcome == "error");
    FUZZ_CHECK(reply.body.contains("error") && reply.body["error"].is_string());
    return 0;
  }
  FUZZ_CHECK(reply.http_status == 200);
  FUZZ_CHECK(reply.outcome == "injected" || reply.outcome == "unchanged" ||
             reply.outcome == "denied");
  const json& response = reply.body["response"];
  FUZZ_CHECK(reply.body["kind"] == "AdmissionReview");
  // A 200 means the review parsed within the depth limit: reading it again is safe.
  const json review = json::parse(body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!review.is_discarded());
  FUZZ_CHECK(response["uid"] == review.at("request").at("uid"));
  if (reply.outcome == "denied") {
    FUZZ_CHECK(response["allowed"] == false);
    FUZZ_CHECK(!response["status"]["message"].get<std::string>().empty());
    return 0;
  }
  FUZZ_CHECK(response["allowed"] == true);
  FUZZ_CHECK(response.contains("patch") == (reply.outcome == "injected"));
  if (reply.outcome != "injected") return 0;
  StatusOr<std::string> patch_text = Base64Decode(response["patch"].get<std::string>());
  FUZZ_CHECK(patch_text.ok());
  const json patch = json::parse(*patch_text, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(patch.is_array() && !patch.empty());
  json patched;
  try {
    patched = review.at("request").at("object").patch(patch);
  } catch (const json::exception& e) {
    std::fprintf(stderr, "the patch does not apply to its pod: %s\n", e.what());
    FUZZ_CHECK(false);
  }
  bool has_sidecar = false;
  for (const json& c : patched["spec"]["initContainers"]) {
    if (c.is_object() && c.value("name", "") == kSidecarContainerName) has_sidecar = true;
  }
  FUZZ_CHECK(has_sidecar);
  return 0;
}
