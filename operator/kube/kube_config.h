// Where the API server is and how to authenticate to it: from a kubeconfig file (kubectl's
// format) or from the pod's service account. Certificates are kept as PEM text, never as paths,
// so the client needs no temporary files.
#pragma once

#include <string>

#include "common/status.h"

namespace korovod::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct KubeConfig {
  std::string server;           // "https://host:port[/prefix]" or "http://host:port"
  std::string token;            // bearer token given inline; empty when token_file is used
  std::string token_file;       // re-read by the client when it changes (projected tokens rotate)
  std::string ca_pem;           // CA bundle that signs the server's certificate
  std::string client_cert_pem;  // client certificate (mutual TLS); empty when unused
  std::string client_key_pem;
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
};

// Reads a kubeconfig. `context` empty = the file's current-context. Relative file paths in it
// (certificate-authority, client-certificate, client-key, tokenFile) resolve against the folder
// of the kubeconfig, as kubectl does. Errors name the file, the context and the missing key.
StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// The pod's service account: KUBERNETES_SERVICE_HOST/PORT, `sa_dir`/{token,ca.crt,namespace}.
StatusOr<KubeConfig> LoadInClusterConfig(const std::string& sa_dir = kServiceAccountDir);

// $KUBECONFIG (its first entry) when set, else the in-cluster service account.
StatusOr<KubeConfig> LoadDefault();

}  // namespace korovod::kube
