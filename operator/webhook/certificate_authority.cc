#include "operator/webhook/certificate_authority.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "operator/webhook/openssl_handles.h"

namespace korovod::k8s_operator {
namespace {

Status SslError(const std::string& what) { return Internal(what + ": " + OpenSslReason()); }

StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return SslError("generating a P-256 key");
  return key;
}

Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return SslError("certificate extension " + value);
  }
  return OkStatus();
}

struct Extension {
  int nid;
  std::string value;
};

// A certificate for `key` named `cn` with `extensions`, signed by issuer_key (issuer null:
// self-signed).
StatusOr<X509Ptr> NewCertificate(const std::string& cn, EVP_PKEY* key, X509* issuer,
                                 EVP_PKEY* issuer_key, std::chrono::seconds validity,
                                 const std::vector<Extension>& extensions) {
  X509Ptr cert(X509_new());
  if (!cert) return SslError("X509_new");
  X509_set_version(cert.get(), 2);  // v3
  // A random 127-bit serial: two CAs made by two replicas at once never share one.
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return SslError("random serial");
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(BN_bin2bn(serial, sizeof(serial), nullptr),
                                                 &BN_free);
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get()))) {
    return SslError("certificate serial");
  }
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(validity.count()));
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  if (X509_set_pubkey(cert.get(), key) != 1) return SslError("X509_set_pubkey");
  X509* issuer_cert = issuer ? issuer : cert.get();
  KV_RETURN_IF_ERROR(AddExtension(cert.get(), issuer_cert, NID_subject_key_identifier, "hash"));
  if (issuer != nullptr) {
    KV_RETURN_IF_ERROR(
        AddExtension(cert.get(), issuer_cert, NID_authority_key_identifier, "keyid:always"));
  }
  for (const Extension& e : extensions) {
    KV_RETURN_IF_ERROR(AddExtension(cert.get(), issuer_cert, e.nid, e.value));
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0) return SslError("signing " + cn);
  return cert;
}

StatusOr<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return SslError("PEM_write_bio_X509");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("PEM_write_bio_PrivateKey");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

StatusOr<X509Ptr> ParseCert(const std::string& what, const std::string& pem) {
  ERR_clear_error();
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return InvalidArgument(what + ": not a PEM certificate: " + OpenSslReason());
  return cert;
}

StatusOr<KeyPtr> ParseKey(const std::string& what, const std::string& pem) {
  ERR_clear_error();
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return InvalidArgument(what + ": not a PEM private key: " + OpenSslReason());
  return key;
}

// Seconds from `now_unix` until the certificate's notAfter (negative once expired).
int64_t SecondsLeft(X509* cert, int64_t now_unix) {
  ASN1_TIME* now = ASN1_TIME_set(nullptr, static_cast<time_t>(now_unix));
  int days = 0, secs = 0;
  const int ok = ASN1_TIME_diff(&days, &secs, now, X509_get0_notAfter(cert));
  ASN1_TIME_free(now);
  return ok == 1 ? int64_t{days} * 86400 + secs : -1;
}

}  // namespace

StatusOr<WebhookCertificates> IssueWebhookCertificates(const std::vector<std::string>& dns_names,
                                                       std::chrono::seconds validity) {
  if (dns_names.empty()) return InvalidArgument("webhook certificate: no DNS names");
  KV_ASSIGN_OR_RETURN(KeyPtr ca_key, NewKey());
  KV_ASSIGN_OR_RETURN(
      X509Ptr ca,
      NewCertificate("korovod-webhook-ca", ca_key.get(), nullptr, ca_key.get(), validity,
                     {{NID_basic_constraints, "critical,CA:TRUE"},
                      {NID_key_usage, "critical,keyCertSign,cRLSign"}}));
  std::string sans;
  for (const std::string& n : dns_names) sans += (sans.empty() ? "DNS:" : ",DNS:") + n;
  KV_ASSIGN_OR_RETURN(KeyPtr key, NewKey());
  KV_ASSIGN_OR_RETURN(X509Ptr leaf,
                      NewCertificate(dns_names.front(), key.get(), ca.get(), ca_key.get(), validity,
                                     {{NID_basic_constraints, "CA:FALSE"},
                                      {NID_key_usage, "critical,digitalSignature"},
                                      {NID_ext_key_usage, "serverAuth"},
                                      {NID_subject_alt_name, sans}}));
  WebhookCertificates out;
  KV_ASSIGN_OR_RETURN(out.ca_crt, CertPem(ca.get()));
  KV_ASSIGN_OR_RETURN(out.ca_key, KeyPem(ca_key.get()));
  KV_ASSIGN_OR_RETURN(out.tls_crt, CertPem(leaf.get()));
  KV_ASSIGN_OR_RETURN(out.tls_key, KeyPem(key.get()));
  return out;
}

Status CheckWebhookCertificates(const WebhookCertificates& certs,
                                const std::vector<std::string>& dns_names, int64_t now_unix,
                                std::chrono::seconds min_remaining) {
  KV_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(kCaCrtKey, certs.ca_crt));
  KV_ASSIGN_OR_RETURN(KeyPtr ca_key, ParseKey(kCaKeyKey, certs.ca_key));
  KV_ASSIGN_OR_RETURN(X509Ptr leaf, ParseCert(kTlsCrtKey, certs.tls_crt));
  KV_ASSIGN_OR_RETURN(KeyPtr key, ParseKey(kTlsKeyKey, certs.tls_key));
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("ca.key does not match ca.crt");
  }
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("tls.key does not match tls.crt");
  }
  if (X509_check_ca(ca.get()) == 0) return InvalidArgument("ca.crt is not a CA certificate");
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr) != 1) {
    return SslError("certificate store");
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_time(param, static_cast<time_t>(now_unix));
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return InvalidArgument(std::string("tls.crt does not verify against ca.crt: ") +
                           X509_verify_cert_error_string(err));
  }
  for (const std::string& n : dns_names) {
    if (X509_check_host(leaf.get(), n.data(), n.size(), X509_CHECK_FLAG_NO_WILDCARDS, nullptr) !=
        1) {
      return InvalidArgument("tls.crt does not name " + n);
    }
  }
  for (auto [what, cert] : {std::pair{"ca.crt", ca.get()}, std::pair{"tls.crt", leaf.get()}}) {
    const int64_t left = SecondsLeft(cert, now_unix);
    if (left < min_remaining.count()) {
      return FailedPrecondition(std::string(what) + " expires in " + std::to_string(left / 86400) +
                                " days (renewed below " +
                                std::to_string(min_remaining.count() / 86400) + ")");
    }
  }
  return OkStatus();
}

}  // namespace korovod::k8s_operator
