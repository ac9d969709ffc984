// The korovod session the TensorFlow kernels submit to: the C function table and client that
// korovod.tensorflow hands over after hvd.init() (korovod_tf_set_client) and takes back before
// hvd.shutdown() closes the client. Submissions hold it shared; set_client waits for them.
#pragma once

#include <shared_mutex>

#include "sidecar/client/c_api.h"

namespace korovod::tf {

class ClientSession {
 public:
  static ClientSession& Get();

  // Locked view: api() is null when korovod is not initialized.
  class Lease {
   public:
    explicit Lease(ClientSession& s) : lock_(s.mu_), api_(s.api_), client_(s.client_) {}
    const KorovodClientApi* api() const { return api_; }
    void* client() const { return client_; }

   private:
    std::shared_lock<std::shared_mutex> lock_;
    const KorovodClientApi* api_;
    void* client_;
  };
  Lease Acquire() { return Lease(*this); }

  // 0, or -1 when the table's version is not this library's.
  int Set(const KorovodClientApi* api, void* client);

 private:
  std::shared_mutex mu_;
  const KorovodClientApi* api_ = nullptr;
  void* client_ = nullptr;
};

}  // namespace korovod::tf
