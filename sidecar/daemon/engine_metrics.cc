#include "sidecar/daemon/engine_metrics.h"

#include <cctype>

namespace korovod::sidecar {

std::vector<double> OpLatencyBuckets() { return http::ExponentialBuckets(1e-5, 2.5, 18); }

std::string CollectiveLabel(OpType type) {
  std::string s = OpTypeName(type);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

StatusOr<std::unique_ptr<EngineMetrics>> EngineMetrics::Create(http::MetricsRegistry& registry) {
  auto m = std::make_unique<EngineMetrics>(Token(), registry);
  KV_RETURN_IF_ERROR(m->Init());
  return m;
}

Status EngineMetrics::Init() {
  http::MetricsRegistry& r = registry_;
  KV_ASSIGN_OR_RETURN(
      cycles_, r.GetCounter("korovod_engine_cycles_total", "Background cycles run by the engine."));
  KV_ASSIGN_OR_RETURN(busy_cycles_,
                      r.GetCounter("korovod_engine_busy_cycles_total",
                                   "Engine cycles in which this rank had ops in flight."));
  KV_ASSIGN_OR_RETURN(negotiation_seconds_,
                      r.GetCounter("korovod_negotiation_seconds_total",
                                   "Seconds spent in negotiation collectives in busy cycles."));
  KV_ASSIGN_OR_RETURN(execution_seconds_,
                      r.GetCounter("korovod_execution_seconds_total",
                                   "Seconds spent executing responses (copies and collectives)."));
  KV_ASSIGN_OR_RETURN(tensors_, r.GetCounter("korovod_tensors_total", "Ops completed."));
  KV_ASSIGN_OR_RETURN(collectives_,
                      r.GetCounter("korovod_collectives_total",
                                   "Data collectives run (a fused buffer counts once)."));
  KV_ASSIGN_OR_RETURN(pipelined_segments_,
                      r.GetCounter("korovod_pipelined_segments_total",
                                   "Segments of fused buffers whose copies overlapped the "
                                   "neighbouring segments' collectives (each also a collective)."));
  KV_ASSIGN_OR_RETURN(lane_collectives_,
                      r.GetCounter("korovod_lane_collectives_total",
                                   "Collectives run on collective lanes, several at once "
                                   "(KOROVOD_COLLECTIVE_LANES; each also a collective)."));
  KV_ASSIGN_OR_RETURN(lanes_peak_busy_,
                      r.GetGauge("korovod_lanes_peak_busy",
                                 "The most collective lanes that ran collectives at once."));
  KV_ASSIGN_OR_RETURN(bytes_, r.GetCounter("korovod_bytes_total",
                                           "Tensor bytes allreduced, gathered or broadcast by "
                                           "this rank."));
  KV_ASSIGN_OR_RETURN(cache_hits_, r.GetCounter("korovod_response_cache_hits_total",
                                                "Ops agreed through the response cache."));
  KV_ASSIGN_OR_RETURN(negotiated_, r.GetCounter("korovod_negotiated_ops_total",
                                                "Ops that went through the coordinator."));
  KV_ASSIGN_OR_RETURN(full_negotiations_,
                      r.GetCounter("korovod_full_negotiations_total",
                                   "Cycles that gathered request lists from every rank."));
  KV_ASSIGN_OR_RETURN(
      steps_, r.GetCounter("korovod_steps_total", "Busy periods of the world (training steps)."));
  KV_ASSIGN_OR_RETURN(
      waited_for_others_seconds_,
      r.GetCounter("korovod_waited_for_others_seconds_total",
                   "Seconds this rank had ops in flight that waited for other ranks."));
  KV_ASSIGN_OR_RETURN(
      others_waited_for_me_seconds_,
      r.GetCounter("korovod_others_waited_for_me_seconds_total",
                   "Seconds other ranks had ops in flight that waited for this rank."));
  KV_ASSIGN_OR_RETURN(waited_before_first_seconds_,
                      r.GetCounter("korovod_waited_before_first_op_seconds_total",
                                   "Of the others' wait for this rank, the seconds before its "
                                   "first op of a step (input-bound when it dominates)."));
  KV_ASSIGN_OR_RETURN(straggler_steps_,
                      r.GetCounter("korovod_straggler_steps_total",
                                   "Steps in which the others waited for this rank longest "
                                   "(longer than KOROVOD_STRAGGLER_THRESHOLD_MS)."));
  KV_ASSIGN_OR_RETURN(fusion_ratio_,
                      r.GetGauge("korovod_fusion_ratio",
                                 "Ops completed per data collective run (tensors / collectives)."));
  KV_ASSIGN_OR_RETURN(fusion_threshold_bytes_,
                      r.GetGauge("korovod_fusion_threshold_bytes", "Tensor fusion threshold."));
  KV_ASSIGN_OR_RETURN(cycle_time_seconds_,
                      r.GetGauge("korovod_cycle_time_seconds", "Engine cycle time."));
  KV_ASSIGN_OR_RETURN(device_allocations_open_,
                      r.GetGauge("korovod_device_allocations_open",
                                 "The trainer's device (GPU) allocations mapped by CUDA IPC now."));
  KV_ASSIGN_OR_RETURN(device_allocations_opened_,
                      r.GetCounter("korovod_device_allocations_opened_total",
                                   "Device allocations opened (once each, then cached)."));
  KV_ASSIGN_OR_RETURN(device_allocations_replaced_,
                      r.GetCounter("korovod_device_allocations_replaced_total",
                                   "Cached device allocations closed because their address came "
                                   "back as a new allocation."));
  for (size_t i = 0; i < kOpTypes; ++i) {
    auto type = static_cast<OpType>(i);
    if (type == OpType::kAddProcessSet || type == OpType::kRemoveProcessSet) {
      continue;  // engine-internal
    }
    http::Labels labels = {{"collective", CollectiveLabel(type)}};
    PerCollective& p = per_collective_[i];
    KV_ASSIGN_OR_RETURN(
        p.ops, r.GetCounter("korovod_ops_total", "Ops completed, per collective type.", labels));
    KV_ASSIGN_OR_RETURN(
        p.bytes, r.GetCounter("korovod_op_bytes_total",
                              "Tensor bytes of completed ops, per collective type.", labels));
    KV_ASSIGN_OR_RETURN(p.latency,
                        r.GetHistogram("korovod_op_latency_seconds",
                                       "Op latency from submission to completion, per collective "
                                       "type.",
                                       OpLatencyBuckets(), labels));
  }
  return OkStatus();
}

void EngineMetrics::UpdateFromStats(const EngineStats& s) {
  cycles_->Set(static_cast<double>(s.cycles));
  busy_cycles_->Set(static_cast<double>(s.busy_cycles));
  negotiation_seconds_->Set(static_cast<double>(s.negotiation_ns) * 1e-9);
  execution_seconds_->Set(static_cast<double>(s.execution_ns) * 1e-9);
  tensors_->Set(static_cast<double>(s.tensors));
  collectives_->Set(static_cast<double>(s.collectives));
  pipelined_segments_->Set(static_cast<double>(s.pipelined_segments));
  lane_collectives_->Set(static_cast<double>(s.lane_collectives));
  lanes_peak_busy_->Set(static_cast<double>(s.lanes_peak_busy));
  bytes_->Set(static_cast<double>(s.bytes));
  cache_hits_->Set(static_cast<double>(s.cache_hits));
  negotiated_->Set(static_cast<double>(s.negotiated));
  full_negotiations_->Set(static_cast<double>(s.full_negotiations));
  steps_->Set(static_cast<double>(s.steps));
  waited_for_others_seconds_->Set(static_cast<double>(s.waited_for_others_ns) * 1e-9);
  others_waited_for_me_seconds_->Set(static_cast<double>(s.others_waited_for_me_ns) * 1e-9);
  waited_before_first_seconds_->Set(static_cast<double>(s.waited_before_first_ns) * 1e-9);
  straggler_steps_->Set(static_cast<double>(s.straggler_steps));
  fusion_ratio_->Set(s.collectives == 0
                         ? 0.0
                         : static_cast<double>(s.tensors) / static_cast<double>(s.collectives));
  fusion_threshold_bytes_->Set(static_cast<double>(s.fusion_threshold_bytes));
  cycle_time_seconds_->Set(s.cycle_time_ms * 1e-3);
}

void EngineMetrics::RecordOp(OpType type, uint64_t bytes, double latency_seconds) {
  auto i = static_cast<size_t>(type);
  if (i >= kOpTypes || per_collective_[i].ops == nullptr) return;
  PerCollective& p = per_collective_[i];
  p.ops->Increment();
  p.bytes->Increment(static_cast<double>(bytes));
  p.latency->Observe(latency_seconds);
}

void EngineMetrics::RecordDeviceAllocations(double open_delta, uint64_t opened, uint64_t replaced) {
  device_allocations_open_->Add(open_delta);
  if (opened > 0) device_allocations_opened_->Increment(static_cast<double>(opened));
  if (replaced > 0) device_allocations_replaced_->Increment(static_cast<double>(replaced));
}

void EngineMetrics::SetPeerBandwidth(int peer_rank, double bytes_per_second) {
  auto g = registry_.GetGauge("korovod_peer_link_bandwidth_bytes_per_second",
                              "Last measured bandwidth of the link to a peer rank.",
                              {{"peer_rank", std::to_string(peer_rank)}});
  if (g.ok()) g.value()->Set(bytes_per_second);
}

}  // namespace korovod::sidecar
