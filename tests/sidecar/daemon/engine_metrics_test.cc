#include "sidecar/daemon/engine_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace korovod::sidecar {
namespace {

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(EngineMetricsTest, MirrorsEngineStats) {
  http::MetricsRegistry r;
  auto m = EngineMetrics::Create(r);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EngineStats s;
  s.cycles = 100;
  s.busy_cycles = 40;
  s.negotiation_ns = 1'500'000'000;
  s.execution_ns = 250'000'000;
  s.tensors = 30;
  s.collectives = 12;
  s.bytes = 1 << 20;
  s.cache_hits = 20;
  s.negotiated = 10;
  s.full_negotiations = 3;
  s.pipelined_segments = 6;
  s.lane_collectives = 9;
  s.lanes_peak_busy = 2;
  s.fusion_threshold_bytes = 64 << 20;
  s.cycle_time_ms = 5;
  s.steps = 7;
  s.waited_for_others_ns = 2'000'000'000;
  s.others_waited_for_me_ns = 500'000'000;
  s.waited_before_first_ns = 125'000'000;
  s.straggler_steps = 4;
  (*m)->UpdateFromStats(s);
  std::string text = r.Render();
  EXPECT_TRUE(Contains(text,
                       "# TYPE korovod_engine_cycles_total counter\n"
                       "korovod_engine_cycles_total 100\n"))
      << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_engine_busy_cycles_total 40\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_negotiation_seconds_total 1.5\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_execution_seconds_total 0.25\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_tensors_total 30\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_collectives_total 12\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_pipelined_segments_total 6\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_lane_collectives_total 9\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_lanes_peak_busy 2\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_bytes_total 1048576\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_response_cache_hits_total 20\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_negotiated_ops_total 10\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_full_negotiations_total 3\n")) << text;
  EXPECT_TRUE(Contains(text, "# TYPE korovod_fusion_ratio gauge\nkorovod_fusion_ratio 2.5\n"))
      << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_fusion_threshold_bytes 67108864\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_cycle_time_seconds 0.005\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_steps_total 7\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_waited_for_others_seconds_total 2\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_others_waited_for_me_seconds_total 0.5\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_waited_before_first_op_seconds_total 0.125\n")) << text;
  EXPECT_TRUE(Contains(text, "\nkorovod_straggler_steps_total 4\n")) << text;
}

TEST(EngineMetricsTest, FusionRatioIsZeroBeforeAnyCollective) {
  http::MetricsRegistry r;
  auto m = EngineMetrics::Create(r);
  ASSERT_TRUE(m.ok());
  (*m)->UpdateFromStats(EngineStats{});
  EXPECT_TRUE(Contains(r.Render(), "\nkorovod_fusion_ratio 0\n"));
}

TEST(EngineMetricsTest, PerCollectiveCountersAndLatency) {
  http::MetricsRegistry r;
  auto m = EngineMetrics::Create(r);
  ASSERT_TRUE(m.ok());
  (*m)->RecordOp(OpType::kAllreduce, 4096, 0.002);
  (*m)->RecordOp(OpType::kAllreduce, 1024, 0.5);
  (*m)->RecordOp(OpType::kBroadcast, 8, 0.00001);
  (*m)->RecordOp(OpType::kAddProcessSet, 0, 1);  // engine-internal: not counted
  std::string text = r.Render();
  EXPECT_TRUE(Contains(text, "korovod_ops_total{collective=\"allreduce\"} 2\n")) << text;
  EXPECT_TRUE(Contains(text, "korovod_ops_total{collective=\"broadcast\"} 1\n")) << text;
  EXPECT_TRUE(Contains(text, "korovod_ops_total{collective=\"reducescatter\"} 0\n")) << text;
  EXPECT_FALSE(Contains(text, "addprocessset")) << text;
  EXPECT_TRUE(Contains(text, "korovod_op_bytes_total{collective=\"allreduce\"} 5120\n")) << text;
  EXPECT_TRUE(Contains(text, "korovod_op_latency_seconds_count{collective=\"allreduce\"} 2\n"))
      << text;
  EXPECT_TRUE(Contains(text, "korovod_op_latency_seconds_sum{collective=\"allreduce\"} 0.502\n"))
      << text;
  // 10 µs lands in the first bucket (le is inclusive).
  EXPECT_TRUE(Contains(
      text, "korovod_op_latency_seconds_bucket{collective=\"broadcast\",le=\"1e-05\"} 1\n"))
      << text;
  EXPECT_TRUE(
      Contains(text, "korovod_op_latency_seconds_bucket{collective=\"allreduce\",le=\"+Inf\"} 2\n"))
      << text;
}

TEST(EngineMetricsTest, PeerBandwidthGaugePerPeer) {
  http::MetricsRegistry r;
  auto m = EngineMetrics::Create(r);
  ASSERT_TRUE(m.ok());
  (*m)->SetPeerBandwidth(1, 2.5e9);
  (*m)->SetPeerBandwidth(3, 1e9);
  (*m)->SetPeerBandwidth(1, 3e9);
  std::string text = r.Render();
  EXPECT_TRUE(
      Contains(text,
               "# TYPE korovod_peer_link_bandwidth_bytes_per_second gauge\n"
               "korovod_peer_link_bandwidth_bytes_per_second{peer_rank=\"1\"} 3000000000\n"
               "korovod_peer_link_bandwidth_bytes_per_second{peer_rank=\"3\"} 1000000000\n"))
      << text;
}

TEST(EngineMetricsTest, CreateFailsOnConflictingRegistration) {
  http::MetricsRegistry r;
  ASSERT_TRUE(r.GetGauge("korovod_tensors_total", "taken").ok());
  auto m = EngineMetrics::Create(r);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("korovod_tensors_total"), std::string::npos);
}

TEST(EngineMetricsTest, CollectiveLabels) {
  EXPECT_EQ(CollectiveLabel(OpType::kAllreduce), "allreduce");
  EXPECT_EQ(CollectiveLabel(OpType::kReduceScatter), "reducescatter");
  EXPECT_EQ(OpLatencyBuckets().size(), 18u);
  EXPECT_DOUBLE_EQ(OpLatencyBuckets().front(), 1e-5);
}

}  // namespace
}  // namespace korovod::sidecar
