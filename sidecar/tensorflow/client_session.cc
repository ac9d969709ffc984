#include "sidecar/tensorflow/client_session.h"

#include <cstdint>
#include <mutex>

namespace korovod::tf {

ClientSession& ClientSession::Get() {
  static ClientSession session;
  return session;
}

int ClientSession::Set(const KorovodClientApi* api, void* client) {
  if (api != nullptr && api->version != KOROVOD_C_API_VERSION) return -1;
  std::unique_lock<std::shared_mutex> lock(mu_);
  api_ = client != nullptr ? api : nullptr;
  client_ = api_ != nullptr ? client : nullptr;
  return 0;
}

}  // namespace korovod::tf

// Called by korovod.tensorflow through ctypes (integers: the addresses Client.c_api() gives).
extern "C" __attribute__((visibility("default"))) int korovod_tf_set_client(uint64_t api,
                                                                            uint64_t client) {
  return korovod::tf::ClientSession::Get().Set(reinterpret_cast<const KorovodClientApi*>(api),
                                               reinterpret_cast<void*>(client));
}
