#include "operator/controller/torch_env.h"

#include <set>
#include <string>

#include "operator/controller/worker_env.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

// "host:port" -> "host" (rank 0's pod's DNS name).
std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

json TorchDistributedEnv(const WorkerIdentity& id) {
  json env = json::array();
  if (!id.elastic_rendezvous.empty()) {
    // Each membership epoch places the worker anew; only its place in the pod is fixed.
    env.push_back(EnvVar(kEnvTorchLocalRank, "0"));
    env.push_back(EnvVar(kEnvTorchLocalWorldSize, "1"));
    return env;
  }
  if (id.ranks <= 1) {
    env.push_back(EnvVar(kEnvTorchRank, std::to_string(id.rank)));
    env.push_back(EnvVar(kEnvTorchLocalRank, "0"));
  }
  env.push_back(EnvVar(kEnvTorchWorldSize, std::to_string(id.size)));
  env.push_back(EnvVar(kEnvTorchLocalWorldSize, std::to_string(id.ranks)));
  env.push_back(EnvVar(kEnvTorchGroupRank, std::to_string(id.index)));
  env.push_back(EnvVar(kEnvTorchMasterAddr, HostOf(id.coordinator)));
  env.push_back(EnvVar(kEnvTorchMasterPort, std::to_string(id.ports.torch_store)));
  return env;
}

void AddTorchDistributedEnv(json& trainer, const WorkerIdentity& id) {
  if (!trainer.contains("env") || !trainer["env"].is_array()) trainer["env"] = json::array();
  json& env = trainer["env"];
  std::set<std::string> present;
  for (const json& e : env) {
    if (e.is_object() && e.contains("name") && e["name"].is_string()) present.insert(e["name"]);
  }
  const bool user_store = present.count(std::string(kEnvTorchMasterPort)) > 0;
  for (json& e : TorchDistributedEnv(id)) {
    if (present.count(e["name"].get<std::string>()) == 0) env.push_back(std::move(e));
  }
  // Under hostNetwork the store's port is the node's: declared on rank 0's trainer, it becomes a
  // hostPort, so the scheduler never places two pods that want it on one node.
  if (id.host_network && id.rank == 0 && id.elastic_rendezvous.empty() && !user_store) {
    if (!trainer.contains("ports") || !trainer["ports"].is_array())
      trainer["ports"] = json::array();
    for (const json& p : trainer["ports"]) {
      if (p.is_object() && p.value("containerPort", 0) == id.ports.torch_store) return;
    }
    trainer["ports"].push_back({{"name", std::string(kTorchStorePortName)},
                                {"containerPort", id.ports.torch_store},
                                {"protocol", "TCP"}});
  }
}

}  // namespace korovod::k8s_operator
