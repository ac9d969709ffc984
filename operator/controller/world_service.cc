#include "operator/controller/world_service.h"

#include "operator/controller/child_metadata.h"
#include "operator/controller/child_names.h"

namespace korovod::k8s_operator {

nlohmann::json BuildWorldService(const HorovodJob& job, const OperatorSettings& settings) {
  const int port = JobWorkerPorts(job, 0, settings).coordinator;
  return nlohmann::json{{"apiVersion", "v1"},
                        {"kind", "Service"},
                        {"metadata", ChildMetadata(job, ServiceName(job))},
                        {"spec",
                         {{"clusterIP", "None"},
                          {"publishNotReadyAddresses", true},
                          {"selector",
                           {{std::string(kLabelJobName), job.metadata.name},
                            {std::string(kLabelRole), std::string(kRoleWorker)}}},
                          {"ports", nlohmann::json::array({{{"name", "coordinator"},
                                                            {"port", port},
                                                            {"targetPort", port},
                                                            {"protocol", "TCP"}}})}}}};
}

}  // namespace korovod::k8s_operator
