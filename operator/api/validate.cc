#include "operator/api/validate.h"

#include <algorithm>
#include <string>

namespace korovod::k8s_operator {
namespace {

constexpr size_t kMaxDnsLabel = 63;
constexpr size_t kMaxInterfaceName = 15;  // IFNAMSIZ - 1

Verdict Fail(std::string_view reason, std::string message) {
  return Verdict{std::string(reason), std::move(message)};
}

const nlohmann::json* Containers(const HorovodJobSpec& spec) {
  auto pod_spec = spec.pod_template.find("spec");
  if (pod_spec == spec.pod_template.end() || !pod_spec->is_object()) return nullptr;
  auto containers = pod_spec->find("containers");
  if (containers == pod_spec->end() || !containers->is_array()) return nullptr;
  return &*containers;
}

std::string ContainerName(const nlohmann::json& c) {
  auto name = c.find("name");
  return name != c.end() && name->is_string() ? name->get<std::string>() : std::string();
}

}  // namespace

int TrainerContainerIndex(const HorovodJobSpec& spec) {
  const nlohmann::json* containers = Containers(spec);
  if (containers == nullptr || containers->empty()) return -1;
  for (size_t i = 0; i < containers->size(); ++i) {
    if (ContainerName((*containers)[i]) == kTrainerContainerName) return static_cast<int>(i);
  }
  return containers->size() == 1 ? 0 : -1;
}

Verdict ValidateSidecarEnv(const std::vector<EnvEntry>& env, std::string_view field) {
  for (size_t i = 0; i < env.size(); ++i) {
    const std::string& name = env[i].name;
    const std::string at = std::string(field) + "[" + std::to_string(i) + "] " + name;
    std::string_view suffix;
    for (std::string_view prefix : {"KOROVOD_", "HOROVOD_"}) {
      if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
        suffix = std::string_view(name).substr(prefix.size());
      }
    }
    bool well_formed = !suffix.empty();
    for (char ch : suffix) {
      well_formed =
          well_formed && ((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_');
    }
    if (!well_formed) {
      return Fail(kReasonInvalidSidecarEnv,
                  at + ": not an engine variable (KOROVOD_* or HOROVOD_*, upper case; see "
                       "docs/configuration.md)");
    }
    for (const auto& [reserved, use] : kSidecarEnvSetByOperator) {
      if (reserved.substr(std::string_view("KOROVOD_").size()) == suffix) {
        return Fail(kReasonInvalidSidecarEnv,
                    at + ": set by the operator from " + std::string(use) + "; not settable here");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (env[j].name == name) {
        return Fail(kReasonInvalidSidecarEnv,
                    at + ": given twice (also at index " + std::to_string(j) + ")");
      }
    }
  }
  return Verdict{};
}

Verdict Validate(std::string_view job_name, const HorovodJobSpec& spec) {
  // An elastic job's replacements take fresh indices: leave room for a few hundred of them.
  const int64_t highest_index =
      spec.elastic ? std::max<int64_t>(999, 2 * MaxReplicas(*spec.elastic, spec.replicas))
                   : spec.replicas - 1;
  const std::string last_pod =
      std::string(job_name) + "-worker-" + std::to_string(std::max<int64_t>(highest_index, 0));
  if (last_pod.size() > kMaxDnsLabel) {
    return Fail(kReasonNameTooLong, "worker pod name \"" + last_pod + "\" is longer than " +
                                        std::to_string(kMaxDnsLabel) +
                                        " characters; shorten metadata.name");
  }

  if (spec.elastic) {
    const int64_t lo = spec.elastic->min_replicas;
    const int64_t hi = MaxReplicas(*spec.elastic, spec.replicas);
    if (hi < lo || spec.replicas < lo || spec.replicas > hi) {
      return Fail(kReasonElasticReplicasOutOfRange,
                  "spec.replicas (" + std::to_string(spec.replicas) +
                      ") must lie within spec.elastic.minReplicas (" + std::to_string(lo) +
                      ") and spec.elastic.maxReplicas (" + std::to_string(hi) + ")");
    }
    if (RanksPerWorker(spec.worker) != 1) {
      return Fail(kReasonElasticRanksPerWorker,
                  "an elastic job runs one rank per worker pod (each pod joins and leaves the "
                  "world alone); this spec gives " +
                      std::to_string(RanksPerWorker(spec.worker)) +
                      " (spec.worker.ranksPerWorker, or spec.worker.gpus): set ranksPerWorker "
                      "to 1");
    }
  }
  const nlohmann::json* containers = Containers(spec);
  if (TrainerContainerIndex(spec) < 0) {
    return Fail(
        kReasonTrainerContainerNotFound,
        "spec.template.spec.containers has " + std::to_string(containers ? containers->size() : 0) +
            " containers and none is named \"" + std::string(kTrainerContainerName) +
            "\"; name the trainer container \"" + std::string(kTrainerContainerName) + "\"");
  }
  for (const char* list : {"containers", "initContainers"}) {
    auto pod_spec = spec.pod_template.find("spec");
    auto it = pod_spec->find(list);
    if (it == pod_spec->end() || !it->is_array()) continue;
    for (const auto& c : *it) {
      if (ContainerName(c) == kSidecarContainerName) {
        return Fail(kReasonReservedContainerName,
                    "spec.template.spec." + std::string(list) + " has a container named \"" +
                        std::string(kSidecarContainerName) +
                        "\", which the operator reserves for the injected sidecar");
      }
    }
  }
  if (auto pod_spec = spec.pod_template.find("spec"); pod_spec != spec.pod_template.end()) {
    auto rp = pod_spec->find("restartPolicy");
    if (rp != pod_spec->end() && rp->is_string() && rp->get<std::string>() != "Never") {
      return Fail(kReasonUnsupportedRestartPolicy,
                  "spec.template.spec.restartPolicy is \"" + rp->get<std::string>() +
                      "\"; a worker that restarts in place would rejoin a world that moved on, "
                      "so only \"Never\" is allowed (the operator restarts the whole world, up to "
                      "spec.runPolicy.backoffLimit times)");
    }
  }

  const WorkerSpec& worker = spec.worker;
  if (worker.gpus > 0 && worker.ranks_per_worker > worker.gpus) {
    return Fail(kReasonRanksExceedGpus,
                "spec.worker.ranksPerWorker is " + std::to_string(worker.ranks_per_worker) +
                    " but each worker has " + std::to_string(worker.gpus) +
                    " GPUs (spec.worker.gpus): every rank needs a GPU of its own");
  }
  if (RanksPerWorker(worker) > 1) {
    // The operator runs the trainer's command once per local rank (korovod-local-ranks -- CMD):
    // it must know the command, not leave it to the image's entrypoint.
    const int t = TrainerContainerIndex(spec);
    const nlohmann::json* containers = Containers(spec);
    const bool has_command = t >= 0 && (*containers)[t].contains("command") &&
                             (*containers)[t]["command"].is_array() &&
                             !(*containers)[t]["command"].empty();
    if (!has_command) {
      return Fail(kReasonLocalRanksNeedCommand,
                  "spec.worker.ranksPerWorker is " + std::to_string(RanksPerWorker(worker)) +
                      " (from " + (worker.ranks_per_worker > 0 ? "ranksPerWorker" : "gpus") +
                      "), so the trainer container's command runs once per local rank; set its "
                      "command (the image's entrypoint cannot be wrapped), or ranksPerWorker: 1");
    }
  }

  if (spec.worker.rdma.count > 0 && spec.worker.rdma.resource_name.empty()) {
    return Fail(kReasonRdmaResourceNameMissing,
                "spec.worker.rdma.count is " + std::to_string(spec.worker.rdma.count) +
                    " but spec.worker.rdma.resourceName is empty; name the device plugin's "
                    "resource, e.g. \"" +
                    std::string(kDefaultRdmaResourceName) + "\"");
  }

  const std::string& iface = spec.networking.interface_name;
  if (!iface.empty()) {
    bool bad = iface.size() > kMaxInterfaceName || iface == "." || iface == "..";
    for (char ch : iface) bad = bad || ch == '/' || ch == ':' || ch <= ' ' || ch == 0x7f;
    if (bad) {
      return Fail(kReasonInvalidInterfaceName,
                  "spec.networking.interface \"" + iface +
                      "\" is not a Linux interface name (at most 15 characters, no '/', ':' or "
                      "whitespace)");
    }
  }

  if (Verdict v = ValidateSidecarEnv(spec.sidecar.env, "spec.sidecar.env"); !v.ok()) return v;

  const GangSpec& gang = spec.scheduling_policy.gang;
  if (gang.enabled && !gang.provider) {
    return Fail(kReasonGangProviderMissing,
                "spec.schedulingPolicy.gang.enabled is true but gang.provider is unset; choose "
                "\"volcano\" or \"scheduler-plugins\"");
  }
  if (gang.min_available && *gang.min_available > spec.replicas) {
    return Fail(kReasonGangMinAvailableExceedsReplicas,
                "spec.schedulingPolicy.gang.minAvailable is " +
                    std::to_string(*gang.min_available) + " but spec.replicas is " +
                    std::to_string(spec.replicas) + "; the gang could never be scheduled");
  }
  return Verdict{};
}

}  // namespace korovod::k8s_operator
