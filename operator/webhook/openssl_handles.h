// Owners of OpenSSL objects (one unique_ptr type per object kind, freed by its own *_free) and
// the reason of the last OpenSSL error, shared by the certificate issuer and the serving-side
// loader.
#pragma once

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

namespace korovod::k8s_operator {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, ExtFree>;
using StorePtr = std::unique_ptr<X509_STORE, StoreFree>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, StoreCtxFree>;

// The queue's oldest error, as text, and the queue cleared; `if_none` when it is empty (a PEM
// reader finding no PEM block sets no error).
inline std::string OpenSslReason(const char* if_none = "unknown OpenSSL error") {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return if_none;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

}  // namespace korovod::k8s_operator
