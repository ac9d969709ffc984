#include "operator/webhook/serving_certificate.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "operator/webhook/openssl_handles.h"

namespace korovod::k8s_operator {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return FailedPrecondition(path + ": cannot be read");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

struct ServingCertificate::Pair {
  X509Ptr leaf;
  std::vector<X509Ptr> chain;  // intermediates after the leaf in tls.crt
  KeyPtr key;
  std::string fingerprint;
};

namespace {

StatusOr<std::shared_ptr<const ServingCertificate::Pair>> ReadPair(const std::string& dir) {
  const std::string crt_path = dir + "/tls.crt";
  const std::string key_path = dir + "/tls.key";
  KV_ASSIGN_OR_RETURN(std::string crt, ReadFile(crt_path));
  KV_ASSIGN_OR_RETURN(std::string key_pem, ReadFile(key_path));
  auto pair = std::make_shared<ServingCertificate::Pair>();
  ERR_clear_error();
  BioPtr bio(BIO_new_mem_buf(crt.data(), static_cast<int>(crt.size())));
  pair->leaf.reset(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!pair->leaf)
    return InvalidArgument(crt_path + ": not a PEM certificate: " + OpenSslReason("no PEM data"));
  while (X509Ptr extra{PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)}) {
    pair->chain.push_back(std::move(extra));
  }
  ERR_clear_error();  // the loop ends on "no start line"
  BioPtr key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  pair->key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!pair->key)
    return InvalidArgument(key_path + ": not a PEM private key: " + OpenSslReason("no PEM data"));
  if (X509_check_private_key(pair->leaf.get(), pair->key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(key_path + " does not match the certificate in " + crt_path);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  X509_digest(pair->leaf.get(), EVP_sha256(), md, &n);
  for (unsigned int i = 0; i < n; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x", md[i]);
    pair->fingerprint += hex;
  }
  return std::shared_ptr<const ServingCertificate::Pair>(std::move(pair));
}

}  // namespace

ServingCertificate::~ServingCertificate() = default;

StatusOr<std::unique_ptr<ServingCertificate>> ServingCertificate::Load(std::string dir, Log log) {
  auto cert = std::make_unique<ServingCertificate>(std::move(dir), std::move(log));
  cert->ReadStamp(&cert->seen_);
  auto pair = ReadPair(cert->dir_);
  if (!pair.ok()) return pair.status().WithContext("webhook certificate");
  cert->current_ = std::move(*pair);
  return cert;
}

bool ServingCertificate::ReadStamp(Stamp* out) const {
  const std::string paths[2] = {dir_ + "/tls.crt", dir_ + "/tls.key"};
  for (int i = 0; i < 2; ++i) {
    struct stat st {};
    if (::stat(paths[i].c_str(), &st) != 0) return false;  // stat follows the kubelet's symlinks
    out->dev[i] = st.st_dev;
    out->ino[i] = st.st_ino;
    out->size[i] = st.st_size;
    out->mtime_ns[i] = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  }
  return true;
}

bool ServingCertificate::Refresh() {
  Stamp now;
  if (!ReadStamp(&now)) return false;  // mid-swap or removed: keep serving what we have
  std::lock_guard<std::mutex> lock(mu_);
  if (now == seen_) return false;
  seen_ = now;
  auto pair = ReadPair(dir_);
  if (!pair.ok()) {
    if (log_) {
      log_("webhook certificate in " + dir_ + " changed but cannot be used (" +
           pair.status().message() + "); still serving " + current_->fingerprint.substr(0, 16));
    }
    return false;
  }
  if ((*pair)->fingerprint == current_->fingerprint) return false;
  if (log_) {
    log_("webhook certificate reloaded from " + dir_ + ": " + current_->fingerprint.substr(0, 16) +
         " -> " + (*pair)->fingerprint.substr(0, 16));
  }
  current_ = std::move(*pair);
  return true;
}

std::string ServingCertificate::Fingerprint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_->fingerprint;
}

int ServingCertificate::OnHandshake(SSL* ssl, void* self) {
  auto* cert = static_cast<ServingCertificate*>(self);
  cert->Refresh();
  std::shared_ptr<const Pair> pair;
  {
    std::lock_guard<std::mutex> lock(cert->mu_);
    pair = cert->current_;
  }
  // SSL_use_* take their own references: the pair may be replaced while this connection lives.
  if (SSL_use_certificate(ssl, pair->leaf.get()) != 1) return 0;
  if (SSL_use_PrivateKey(ssl, pair->key.get()) != 1) return 0;
  SSL_clear_chain_certs(ssl);
  for (const X509Ptr& c : pair->chain) {
    if (SSL_add1_chain_cert(ssl, c.get()) != 1) return 0;
  }
  return 1;
}

}  // namespace korovod::k8s_operator
