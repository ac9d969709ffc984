// Shared by the webhook server's tests: test certificates made with the openssl tool (a CA and
// two server certificates for 127.0.0.1), a Secret volume as the kubelet writes it, and a
// StatefulSet pod's AdmissionReview.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/base64.h"

namespace korovod::k8s_operator::webhook_test {

namespace fs = std::filesystem;
using nlohmann::json;

// The patch as sent, or "" when it is not base64 (the assertion on its JSON then fails).
inline std::string Unbase64(const std::string& text) {
  StatusOr<std::string> decoded = Base64Decode(text);
  return decoded.ok() ? decoded.value() : std::string();
}

// A CA and two server certificates for IP 127.0.0.1 (a, b) signed by it.
class Certs {
 public:
  Certs() {
    dir_ = fs::path(::testing::TempDir()) / ("webhook_certs_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "server.ext")
        << "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n";
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
    std::string script = "cd " + dir_.string() + " && openssl req -x509" + ec +
                         "-keyout ca.key -out ca.crt -subj /CN=webhook-test-ca -days 1";
    for (const char* n : {"a", "b"}) {
      const std::string s(n);
      script += " && openssl req" + ec + "-keyout " + s + ".key -out " + s + ".csr -subj /CN=" + s +
                " && openssl x509 -req -in " + s + ".csr -CA ca.crt -CAkey ca.key " +
                "-CAcreateserial -out " + s + ".crt -days 1 -extfile server.ext";
    }
    ok_ = std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
  }
  bool ok() const { return ok_; }
  fs::path path(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
  bool ok_ = false;
};

inline const Certs& TestCerts() {
  static const Certs certs;
  return certs;
}

// A Secret volume as the kubelet writes it: tls.* -> ..data/tls.*, ..data -> a dated folder,
// swapped atomically by rename.
class SecretVolume {
 public:
  explicit SecretVolume(const std::string& name) {
    dir_ = fs::path(::testing::TempDir()) / ("webhook_vol_" + name + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::create_symlink("..data/tls.crt", dir_ / "tls.crt");
    fs::create_symlink("..data/tls.key", dir_ / "tls.key");
  }
  ~SecretVolume() { fs::remove_all(dir_); }
  void Project(const std::string& crt, const std::string& key) {
    const std::string gen = "..gen" + std::to_string(++generation_);
    fs::create_directories(dir_ / gen);
    fs::copy_file(TestCerts().path(crt), dir_ / gen / "tls.crt");
    fs::copy_file(TestCerts().path(key), dir_ / gen / "tls.key");
    fs::create_symlink(gen, dir_ / "..data_tmp");
    fs::rename(dir_ / "..data_tmp", dir_ / "..data");
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
  int generation_ = 0;
};

inline json StatefulSetPod() {
  return json::parse(R"({
    "metadata": {"name": "bert-1",
      "labels": {"korovod.dev/inject": "true", "apps.kubernetes.io/pod-index": "1"},
      "annotations": {"korovod.dev/world-size": "2"},
      "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "bert",
                           "uid": "u", "controller": true}]},
    "spec": {"subdomain": "bert", "containers": [{"name": "main", "image": "trainer:1"}]}
  })");
}

inline json Review(const json& pod) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "uid-7"},
            {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
            {"operation", "CREATE"},
            {"namespace", "ml"},
            {"object", pod}}}};
}

}  // namespace korovod::k8s_operator::webhook_test
