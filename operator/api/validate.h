// Semantic validation of a HorovodJob that passed the CRD schema but makes no sense (gang
// minAvailable above replicas, RDMA without a device resource, no trainer container, ...).
// The result feeds the SpecValid condition: a reason (CamelCase, stable) and a message.
#pragma once

#include <string>
#include <string_view>

#include "operator/api/types.h"

namespace korovod::k8s_operator {

// Reasons Validate returns. Stable: users and alerts match on them.
inline constexpr std::string_view kReasonValid = "Valid";
inline constexpr std::string_view kReasonGangMinAvailableExceedsReplicas =
    "GangMinAvailableExceedsReplicas";
inline constexpr std::string_view kReasonGangProviderMissing = "GangProviderMissing";
inline constexpr std::string_view kReasonRdmaResourceNameMissing = "RdmaResourceNameMissing";
inline constexpr std::string_view kReasonRanksExceedGpus = "RanksPerWorkerExceedsGpus";
inline constexpr std::string_view kReasonLocalRanksNeedCommand = "LocalRanksNeedCommand";
inline constexpr std::string_view kReasonTrainerContainerNotFound = "TrainerContainerNotFound";
inline constexpr std::string_view kReasonReservedContainerName = "ReservedContainerName";
inline constexpr std::string_view kReasonUnsupportedRestartPolicy = "UnsupportedRestartPolicy";
inline constexpr std::string_view kReasonInvalidInterfaceName = "InvalidInterfaceName";
inline constexpr std::string_view kReasonNameTooLong = "NameTooLong";
inline constexpr std::string_view kReasonInvalidSidecarEnv = "InvalidSidecarEnv";
inline constexpr std::string_view kReasonElasticReplicasOutOfRange = "ElasticReplicasOutOfRange";
inline constexpr std::string_view kReasonElasticRanksPerWorker = "ElasticNeedsOneRankPerWorker";

struct Verdict {
  std::string reason{kReasonValid};
  std::string message;
  bool ok() const { return reason == kReasonValid; }
};

// The index of the trainer container in spec.template.spec.containers: the container named
// kTrainerContainerName, else the only container; -1 when neither exists.
int TrainerContainerIndex(const HorovodJobSpec& spec);

// spec.sidecar.env: names must be engine variables (KOROVOD_* or HOROVOD_*, upper case, digits,
// underscores), appear once, and not be one of kSidecarEnvSetByOperator (or its HOROVOD_
// spelling). Shared with the injection webhook's korovod.dev/sidecar-env annotation.
Verdict ValidateSidecarEnv(const std::vector<EnvEntry>& env, std::string_view field);

// The first problem found, or a Verdict with reason kReasonValid. `job_name` is checked too:
// worker pods are named "<job>-worker-<i>" and must stay valid DNS labels (63 characters).
Verdict Validate(std::string_view job_name, const HorovodJobSpec& spec);

}  // namespace korovod::k8s_operator
