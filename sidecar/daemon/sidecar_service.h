// SidecarService: the trainer-facing gRPC service (korovod/sidecar/v1/sidecar.proto) over the
// rank's current epoch (its engine and op loop; rank_epochs.h).
#pragma once

#include <functional>
#include <string>

#include "korovod/sidecar/v1/sidecar.grpc.pb.h"
#include "sidecar/daemon/memory_inbox.h"
#include "sidecar/daemon/rank_epochs.h"
#include "sidecar/daemon/sidecar_config.h"

namespace korovod::sidecar {

// Shutdown is served through gRPC's callback API, the rest synchronously: only a callback
// handler learns when its reply has been sent.
class SidecarService final : public v1::Sidecar::WithCallbackMethod_Shutdown<v1::Sidecar::Service> {
 public:
  // `on_shutdown` runs (on a gRPC thread) when a client asks the sidecar to stop, once the reply
  // to that client is out (the server shutdown it leads to would otherwise cancel the reply); it
  // must only signal the main thread. Everything must outlive the service.
  SidecarService(const SidecarConfig& config, RankEpochs& epochs, std::string arena_name,
                 uint64_t arena_bytes, std::function<void(const std::string&)> on_shutdown);

  // What Hello tells trainers about device tensors (hvd.nccl_built(), hvd.cuda_built()).
  // The memory channel's socket and inbox (inbox outlives the service): each Hello starts the
  // inbox's session and gives the trainer its token.
  void set_memory_channel(std::string path, MemoryInbox* inbox) {
    memory_socket_ = std::move(path);
    memory_inbox_ = inbox;
  }
  void set_device_backend(std::string kind, int nccl_version) {
    device_backend_ = std::move(kind);
    nccl_version_ = nccl_version;
  }

  grpc::Status Hello(grpc::ServerContext* ctx, const v1::HelloRequest* req,
                     v1::HelloReply* reply) override;
  grpc::Status AddProcessSet(grpc::ServerContext* ctx, const v1::AddProcessSetRequest* req,
                             v1::AddProcessSetReply* reply) override;
  grpc::Status RemoveProcessSet(grpc::ServerContext* ctx, const v1::RemoveProcessSetRequest* req,
                                v1::RemoveProcessSetReply* reply) override;
  grpc::Status StartTimeline(grpc::ServerContext* ctx, const v1::StartTimelineRequest* req,
                             v1::StartTimelineReply* reply) override;
  grpc::Status StopTimeline(grpc::ServerContext* ctx, const v1::StopTimelineRequest* req,
                            v1::StopTimelineReply* reply) override;
  grpc::Status GetStats(grpc::ServerContext* ctx, const v1::GetStatsRequest* req,
                        v1::GetStatsReply* reply) override;
  grpc::Status Membership(grpc::ServerContext* ctx, const v1::MembershipRequest* req,
                          v1::MembershipReply* reply) override;
  grpc::ServerUnaryReactor* Shutdown(grpc::CallbackServerContext* ctx,
                                     const v1::ShutdownRequest* req,
                                     v1::ShutdownReply* reply) override;

 private:
  const SidecarConfig& config_;
  // The current epoch's engine, or an error for a call that comes before any session.
  StatusOr<std::shared_ptr<ServedEpoch>> Current() const;

  RankEpochs& epochs_;
  std::string arena_name_;
  uint64_t arena_bytes_;
  std::string device_backend_ = "none";
  int nccl_version_ = 0;
  std::string memory_socket_;
  MemoryInbox* memory_inbox_ = nullptr;
  std::function<void(const std::string&)> on_shutdown_;
};

}  // namespace korovod::sidecar
