// EngineMetrics: the engine's counters as Prometheus metrics (all named korovod_*).
//
// Two feeds: UpdateFromStats mirrors an EngineStats snapshot (call it before each scrape, e.g. from
// HealthServerOptions::before_scrape), and RecordOp / SetPeerBandwidth are called as ops complete
// and links are measured. Thread-safe.
//
//   korovod_engine_cycles_total                 counter  background cycles run
//   korovod_engine_busy_cycles_total            counter  cycles with ops in flight
//   korovod_negotiation_seconds_total           counter  time in negotiation collectives
//   korovod_execution_seconds_total             counter  time executing responses
//   korovod_tensors_total                       counter  ops completed
//   korovod_collectives_total                   counter  data collectives run (fused buffer = 1)
//   korovod_bytes_total                         counter  tensor bytes processed by this rank
//   korovod_response_cache_hits_total           counter  ops agreed through the response cache
//   korovod_negotiated_ops_total                counter  ops that went through the coordinator
//   korovod_full_negotiations_total             counter  cycles that gathered request lists
//   korovod_pipelined_segments_total           counter  segments of pipelined fused buffers
//   korovod_lane_collectives_total             counter  collectives run on collective lanes
//   korovod_lanes_peak_busy                    gauge    most lanes running collectives at once
//   korovod_steps_total                         counter  busy periods of the world (steps)
//   korovod_waited_for_others_seconds_total     counter  had ops in flight, others not ready
//   korovod_others_waited_for_me_seconds_total  counter  others had ops in flight, it not ready
//   korovod_waited_before_first_op_seconds_total counter of that, before its first op of a step
//   korovod_straggler_steps_total               counter  steps in which it was the straggler
//   korovod_fusion_ratio                        gauge    tensors / collectives (0 before any)
//   korovod_fusion_threshold_bytes              gauge
//   korovod_cycle_time_seconds                  gauge
//   korovod_ops_total{collective}               counter  ops completed, per collective type
//   korovod_op_bytes_total{collective}          counter  their tensor bytes
//   korovod_op_latency_seconds{collective}      histogram  submit to completion
//   korovod_peer_link_bandwidth_bytes_per_second{peer_rank}  gauge  measured link bandwidth
//
// collective is the lower-case op type: allreduce, allgather, broadcast, alltoall, reducescatter,
// barrier, join (engine-internal ops such as add-process-set are not counted). Every series of
// those exists from Create on, with zeros.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/http/metrics_registry.h"
#include "common/status.h"
#include "runtime/core/engine.h"
#include "runtime/core/op_request.h"

namespace korovod::sidecar {

// Latency buckets of korovod_op_latency_seconds: 10 µs to ~84 s, factor 2.5 (18 buckets).
std::vector<double> OpLatencyBuckets();

// "allreduce", "reducescatter", ...: OpTypeName lower-cased.
std::string CollectiveLabel(OpType type);

class EngineMetrics {
  struct Token {  // private: only Create constructs
    explicit Token() = default;
  };

 public:
  // Registers the metrics in `registry`, which must outlive this object. Fails only if the
  // registry already holds one of the names with another type or labels.
  static StatusOr<std::unique_ptr<EngineMetrics>> Create(http::MetricsRegistry& registry);
  EngineMetrics(Token, http::MetricsRegistry& registry) : registry_(registry) {}
  EngineMetrics(const EngineMetrics&) = delete;
  EngineMetrics& operator=(const EngineMetrics&) = delete;

  // Mirrors the cumulative EngineStats counters and derives the fusion ratio.
  void UpdateFromStats(const EngineStats& stats);

  // One completed op of `type` with `bytes` of tensor data, `latency_seconds` from submission to
  // completion.
  void RecordOp(OpType type, uint64_t bytes, double latency_seconds);

  // Last measured bandwidth of the link to `peer_rank`.
  void SetPeerBandwidth(int peer_rank, double bytes_per_second);

  // The trainer's device allocations mapped (CUDA IPC): `open_delta` to the ones open now,
  // `opened` new opens, `replaced` closed because their address came back as a new allocation.
  void RecordDeviceAllocations(double open_delta, uint64_t opened, uint64_t replaced);

 private:
  static constexpr size_t kOpTypes = static_cast<size_t>(OpType::kRemoveProcessSet) + 1;
  struct PerCollective {
    http::Counter* ops = nullptr;
    http::Counter* bytes = nullptr;
    http::Histogram* latency = nullptr;
  };

  Status Init();

  http::MetricsRegistry& registry_;
  http::Counter* cycles_ = nullptr;
  http::Counter* busy_cycles_ = nullptr;
  http::Counter* negotiation_seconds_ = nullptr;
  http::Counter* execution_seconds_ = nullptr;
  http::Counter* tensors_ = nullptr;
  http::Counter* collectives_ = nullptr;
  http::Counter* pipelined_segments_ = nullptr;
  http::Counter* lane_collectives_ = nullptr;
  http::Gauge* lanes_peak_busy_ = nullptr;
  http::Counter* bytes_ = nullptr;
  http::Counter* cache_hits_ = nullptr;
  http::Counter* negotiated_ = nullptr;
  http::Counter* full_negotiations_ = nullptr;
  http::Counter* steps_ = nullptr;
  http::Counter* waited_for_others_seconds_ = nullptr;
  http::Counter* others_waited_for_me_seconds_ = nullptr;
  http::Counter* waited_before_first_seconds_ = nullptr;
  http::Counter* straggler_steps_ = nullptr;
  http::Gauge* fusion_ratio_ = nullptr;
  http::Gauge* fusion_threshold_bytes_ = nullptr;
  http::Gauge* cycle_time_seconds_ = nullptr;
  http::Gauge* device_allocations_open_ = nullptr;
  http::Counter* device_allocations_opened_ = nullptr;
  http::Counter* device_allocations_replaced_ = nullptr;
  std::array<PerCollective, kOpTypes> per_collective_{};  // fixed after Create; internal types null
};

}  // namespace korovod::sidecar
