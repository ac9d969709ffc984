#include "sidecar/daemon/sidecar_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "sidecar/control/grpc_status.h"
#include "sidecar/control/protocol_version.h"

namespace korovod::sidecar {
namespace {

Deadline DeadlineOf(const grpc::ServerContext* ctx, std::chrono::milliseconds cap) {
  const auto grpc_deadline = ctx->deadline();
  const auto capped = std::chrono::system_clock::now() + cap;
  const auto at = std::min(grpc_deadline, capped);
  const auto left = at - std::chrono::system_clock::now();
  return Deadline::After(std::max(std::chrono::milliseconds(0),
                                  std::chrono::duration_cast<std::chrono::milliseconds>(left)));
}

}  // namespace

SidecarService::SidecarService(const SidecarConfig& config, RankEpochs& epochs,
                               std::string arena_name, uint64_t arena_bytes,
                               std::function<void(const std::string&)> on_shutdown)
    : config_(config),
      epochs_(epochs),
      arena_name_(std::move(arena_name)),
      arena_bytes_(arena_bytes),
      on_shutdown_(std::move(on_shutdown)) {}

grpc::Status SidecarService::Hello(grpc::ServerContext* ctx, const v1::HelloRequest* req,
                                   v1::HelloReply* reply) {
  reply->set_protocol_version(kSidecarProtocolVersion);
  Status s = CheckProtocolVersion(req->protocol_version(), kSidecarProtocolVersion);
  if (!s.ok()) return ToGrpcStatus(s);
  // Elastic: the membership epoch forms now, so this wait is bounded by the client's deadline.
  auto epoch = epochs_.ForSession(DeadlineOf(ctx, std::chrono::hours(24)));
  if (!epoch.ok()) return ToGrpcStatus(epoch.status());
  const ServedEpoch& e = **epoch;
  s = e.loop->WaitReadyForClient(DeadlineOf(ctx, std::chrono::milliseconds(2000)));
  if (!s.ok()) return ToGrpcStatus(s);
  e.loop->ExpectClient(req->client_pid());
  static std::atomic<uint64_t> sessions{0};
  reply->set_rank(e.rank);
  reply->set_size(e.size);
  reply->set_local_rank(e.local_rank);
  reply->set_local_size(e.local_size);
  reply->set_cross_rank(e.cross_rank);
  reply->set_cross_size(e.cross_size);
  reply->set_epoch(e.epoch);
  reply->set_formed_version(e.formed_version);
  reply->set_arena_name(arena_name_);
  reply->set_arena_bytes(arena_bytes_);
  reply->set_device_backend(device_backend_);
  reply->set_nccl_version(nccl_version_);
  reply->set_op_timeout_ms(static_cast<uint32_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(config_.op_timeout).count()));
  if (memory_inbox_ != nullptr) {
    const MemoryToken token = memory_inbox_->StartSession();
    reply->set_memory_socket(memory_socket_);
    reply->set_memory_token(std::string(reinterpret_cast<const char*>(token.data()), token.size()));
  }
  reply->set_session_id("rank" + std::to_string(e.rank) + "-session" +
                        std::to_string(sessions.fetch_add(1) + 1));
  return grpc::Status::OK;
}

StatusOr<std::shared_ptr<ServedEpoch>> SidecarService::Current() const {
  std::shared_ptr<ServedEpoch> e = epochs_.current();
  if (e == nullptr) {
    return FailedPrecondition("korovod-sidecar rank " + std::to_string(config_.rank) +
                              " has no membership epoch now (between trainer sessions): call "
                              "Hello (hvd.init) first");
  }
  return e;
}

grpc::Status SidecarService::AddProcessSet(grpc::ServerContext* ctx,
                                           const v1::AddProcessSetRequest* req,
                                           v1::AddProcessSetReply* reply) {
  std::vector<int> ranks(req->ranks().begin(), req->ranks().end());
  auto e = Current();
  if (!e.ok()) return ToGrpcStatus(e.status());
  auto id = (*e)->engine->AddProcessSet(std::move(ranks), DeadlineOf(ctx, std::chrono::hours(24)));
  if (!id.ok()) return ToGrpcStatus(id.status());
  reply->set_id(*id);
  return grpc::Status::OK;
}

grpc::Status SidecarService::RemoveProcessSet(grpc::ServerContext* ctx,
                                              const v1::RemoveProcessSetRequest* req,
                                              v1::RemoveProcessSetReply* reply) {
  auto e = Current();
  if (!e.ok()) return ToGrpcStatus(e.status());
  auto removed = (*e)->engine->RemoveProcessSet(req->id(), DeadlineOf(ctx, std::chrono::hours(24)));
  if (!removed.ok()) return ToGrpcStatus(removed.status());
  reply->set_removed(*removed);
  return grpc::Status::OK;
}

grpc::Status SidecarService::StartTimeline(grpc::ServerContext*,
                                           const v1::StartTimelineRequest* req,
                                           v1::StartTimelineReply*) {
  auto e = Current();
  if (!e.ok()) return ToGrpcStatus(e.status());
  return ToGrpcStatus((*e)->engine->StartTimeline(req->path(), req->mark_cycles()));
}

grpc::Status SidecarService::StopTimeline(grpc::ServerContext*, const v1::StopTimelineRequest*,
                                          v1::StopTimelineReply*) {
  auto e = Current();
  if (!e.ok()) return ToGrpcStatus(e.status());
  return ToGrpcStatus((*e)->engine->StopTimeline());
}

grpc::Status SidecarService::GetStats(grpc::ServerContext*, const v1::GetStatsRequest*,
                                      v1::GetStatsReply* reply) {
  auto e = Current();
  if (!e.ok()) return ToGrpcStatus(e.status());
  const EngineStats s = (*e)->engine->stats();
  v1::EngineStats* out = reply->mutable_stats();
  out->set_cycles(s.cycles);
  out->set_busy_cycles(s.busy_cycles);
  out->set_negotiation_ns(s.negotiation_ns);
  out->set_execution_ns(s.execution_ns);
  out->set_tensors(s.tensors);
  out->set_collectives(s.collectives);
  out->set_bytes(s.bytes);
  out->set_cache_hits(s.cache_hits);
  out->set_negotiated(s.negotiated);
  out->set_full_negotiations(s.full_negotiations);
  out->set_fusion_threshold_bytes(s.fusion_threshold_bytes);
  out->set_cycle_time_ms(s.cycle_time_ms);
  return grpc::Status::OK;
}

grpc::Status SidecarService::Membership(grpc::ServerContext* ctx, const v1::MembershipRequest*,
                                        v1::MembershipReply* reply) {
  auto m = epochs_.QueryMembership(DeadlineOf(ctx, std::chrono::milliseconds(10000)));
  if (!m.ok()) return ToGrpcStatus(m.status());
  reply->set_epoch(m->epoch);
  reply->set_formed_version(m->formed_version);
  reply->set_version(m->version);
  reply->set_update(m->update);
  return grpc::Status::OK;
}

namespace {

// Answers OK, then runs `after` once gRPC is done with the call (the reply sent, or the caller
// gone). gRPC owns the reactor until OnDone, its last callback.
class ReplyThen final : public grpc::ServerUnaryReactor {
 public:
  explicit ReplyThen(std::function<void()> after) : after_(std::move(after)) {
    Finish(grpc::Status::OK);
  }
  void OnDone() override {
    after_();
    delete this;
  }

 private:
  std::function<void()> after_;
};

}  // namespace

grpc::ServerUnaryReactor* SidecarService::Shutdown(grpc::CallbackServerContext*,
                                                   const v1::ShutdownRequest* req,
                                                   v1::ShutdownReply*) {
  return new ReplyThen([this, reason = req->reason()] { on_shutdown_(reason); });
}

}  // namespace korovod::sidecar
