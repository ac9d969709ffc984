#include "operator/controller/world_config_map.h"

#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"

namespace korovod::k8s_operator {

nlohmann::json BuildWorldConfigMap(const HorovodJob& job, int64_t epoch,
                                   const OperatorSettings& settings) {
  std::string members;
  for (int64_t i = 0; i < job.spec.replicas; ++i) {
    if (i > 0) members += "\n";
    members += WorkerHost(job, i, settings);
  }
  return nlohmann::json{{"apiVersion", "v1"},
                        {"kind", "ConfigMap"},
                        {"metadata", ChildMetadata(job, WorldConfigMapName(job))},
                        {"data",
                         {{"epoch", std::to_string(epoch)},
                          {"size", std::to_string(WorldSize(job.spec))},
                          {"coordinator", CoordinatorAddress(job, settings)},
                          {"members", members}}}};
}

}  // namespace korovod::k8s_operator
