#include "operator/kube/kube_config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/base64.h"
#include "common/env_settings.h"

namespace korovod::kube {
namespace {

StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FailedPrecondition(what + ": cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

// Finds the entry named `name` in a kubeconfig list (clusters, users, contexts) and returns its
// inner map (entry[inner]).
StatusOr<YAML::Node> FindNamed(const YAML::Node& root, const std::string& list,
                               const std::string& inner, const std::string& name,
                               const std::string& where) {
  const YAML::Node entries = root[list];
  if (entries && entries.IsSequence()) {
    for (const YAML::Node& entry : entries) {
      if (entry["name"] && entry["name"].as<std::string>() == name) {
        if (!entry[inner] || !entry[inner].IsMap()) {
          return InvalidArgument(where + ": " + list + " entry \"" + name + "\" has no " + inner);
        }
        return entry[inner];
      }
    }
  }
  return InvalidArgument(where + ": no " + list + " entry named \"" + name + "\"");
}

std::string Str(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string();
}

// Reads `<key>-data` (base64) or `<key>` (a path, relative to `dir`) into `out`.
Status ReadPemField(const YAML::Node& map, const std::string& key, const std::string& dir,
                    const std::string& where, std::string* out) {
  const std::string data = Str(map, (key + "-data").c_str());
  if (!data.empty()) {
    StatusOr<std::string> decoded = Base64Decode(data);
    if (!decoded.ok()) return decoded.status().WithContext(where + ": " + key + "-data");
    *out = std::move(decoded).value();
    return OkStatus();
  }
  std::string path = Str(map, key.c_str());
  if (path.empty()) return OkStatus();
  if (std::filesystem::path(path).is_relative())
    path = (std::filesystem::path(dir) / path).string();
  KV_ASSIGN_OR_RETURN(*out, ReadFile(path, where + ": " + key));
  return OkStatus();
}

StatusOr<KubeConfig> ParseKubeconfig(const YAML::Node& root, const std::string& path,
                                     const std::string& context_arg) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::string context = context_arg.empty() ? Str(root, "current-context") : context_arg;
  if (context.empty()) {
    return InvalidArgument(path + ": no context given and no current-context set");
  }
  const std::string where = path + " context \"" + context + "\"";
  KV_ASSIGN_OR_RETURN(YAML::Node ctx, FindNamed(root, "contexts", "context", context, path));
  const std::string cluster_name = Str(ctx, "cluster");
  if (cluster_name.empty()) return InvalidArgument(where + ": context has no cluster");
  KV_ASSIGN_OR_RETURN(YAML::Node cluster,
                      FindNamed(root, "clusters", "cluster", cluster_name, where));
  KubeConfig config;
  config.server = Str(cluster, "server");
  if (config.server.empty()) {
    return InvalidArgument(where + ": cluster \"" + cluster_name + "\" has no server");
  }
  const std::string skip = Str(cluster, "insecure-skip-tls-verify");
  config.insecure_skip_tls_verify = skip == "true";
  KV_RETURN_IF_ERROR(ReadPemField(cluster, "certificate-authority", dir, where, &config.ca_pem));
  const std::string ns = Str(ctx, "namespace");
  if (!ns.empty()) config.default_namespace = ns;

  const std::string user_name = Str(ctx, "user");
  if (user_name.empty()) return config;  // anonymous
  KV_ASSIGN_OR_RETURN(YAML::Node user, FindNamed(root, "users", "user", user_name, where));
  KV_RETURN_IF_ERROR(ReadPemField(user, "client-certificate", dir, where, &config.client_cert_pem));
  KV_RETURN_IF_ERROR(ReadPemField(user, "client-key", dir, where, &config.client_key_pem));
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return InvalidArgument(where + ": user \"" + user_name +
                           "\" needs both client-certificate and client-key");
  }
  config.token = Str(user, "token");
  std::string token_file = Str(user, "tokenFile");
  if (config.token.empty() && !token_file.empty()) {
    if (std::filesystem::path(token_file).is_relative()) {
      token_file = (std::filesystem::path(dir) / token_file).string();
    }
    // Read once now so a wrong path fails at start-up rather than at the first request.
    KV_ASSIGN_OR_RETURN(std::string unused, ReadFile(token_file, where + ": tokenFile"));
    (void)unused;
    config.token_file = token_file;
  }
  if (user["exec"] || user["auth-provider"]) {
    if (config.token.empty() && config.token_file.empty() && config.client_cert_pem.empty()) {
      return InvalidArgument(where + ": user \"" + user_name +
                             "\" uses exec/auth-provider credentials, which are not supported");
    }
  }
  return config;
}

}  // namespace

StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  // yaml-cpp throws; nothing escapes this function.
  try {
    KV_ASSIGN_OR_RETURN(std::string text, ReadFile(path, "kubeconfig"));
    return ParseKubeconfig(YAML::Load(text), path, context);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": malformed kubeconfig: " + e.what());
  }
}

StatusOr<KubeConfig> LoadInClusterConfig(const std::string& sa_dir) {
  // Kubernetes' own variables, not korovod settings: read, not logged as overrides.
  const EnvSettings env(ProcessGetenv(), logging::Subsystem::kOperator);
  const auto host = env.Find("KUBERNETES_SERVICE_HOST");
  const auto port = env.Find("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    return FailedPrecondition(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
        "(not running in a pod?)");
  }
  KubeConfig config;
  const std::string& h = host->value;
  config.server =
      "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port->value;
  config.token_file = sa_dir + "/token";
  KV_ASSIGN_OR_RETURN(std::string token, ReadFile(config.token_file, "in-cluster config token"));
  if (Trim(token).empty()) {
    return FailedPrecondition("in-cluster config: " + config.token_file + " is empty");
  }
  KV_ASSIGN_OR_RETURN(config.ca_pem, ReadFile(sa_dir + "/ca.crt", "in-cluster config CA"));
  auto ns = ReadFile(sa_dir + "/namespace", "in-cluster config namespace");
  if (ns.ok() && !Trim(ns.value()).empty()) config.default_namespace = Trim(ns.value());
  return config;
}

StatusOr<KubeConfig> LoadDefault() {
  const auto kubeconfig =
      EnvSettings(ProcessGetenv(), logging::Subsystem::kOperator).Find("KUBECONFIG");
  if (kubeconfig) {
    std::string path = kubeconfig->value;
    path = path.substr(0, path.find(':'));  // kubectl merges a list; we take the first file
    return LoadKubeconfig(path);
  }
  return LoadInClusterConfig();
}

}  // namespace korovod::kube
