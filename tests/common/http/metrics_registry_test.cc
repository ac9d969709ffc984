#include "common/http/metrics_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace korovod::http {
namespace {

template <typename T>
T* Must(StatusOr<T*> s) {
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? s.value() : nullptr;
}

TEST(MetricsRegistryTest, ExpositionTextExact) {
  MetricsRegistry r;
  Must(r.GetCounter("korovod_requests_total", "Requests served."))->Increment(3);
  Must(r.GetGauge("korovod_temperature", "Line one\nback\\slash", {{"path", "plain"}}))->Set(-2);
  Must(r.GetGauge("korovod_temperature", "ignored", {{"path", "a\"b\\c\nd"}}))->Set(1.5);
  Histogram* h =
      Must(r.GetHistogram("korovod_latency_seconds", "Latency.", {0.25, 1, 10}, {{"op", "x"}}));
  for (double v : {0.125, 0.25, 0.5, 20.0}) h->Observe(v);

  EXPECT_EQ(r.Render(),
            "# HELP korovod_latency_seconds Latency.\n"
            "# TYPE korovod_latency_seconds histogram\n"
            "korovod_latency_seconds_bucket{op=\"x\",le=\"0.25\"} 2\n"
            "korovod_latency_seconds_bucket{op=\"x\",le=\"1\"} 3\n"
            "korovod_latency_seconds_bucket{op=\"x\",le=\"10\"} 3\n"
            "korovod_latency_seconds_bucket{op=\"x\",le=\"+Inf\"} 4\n"
            "korovod_latency_seconds_sum{op=\"x\"} 20.875\n"
            "korovod_latency_seconds_count{op=\"x\"} 4\n"
            "# HELP korovod_requests_total Requests served.\n"
            "# TYPE korovod_requests_total counter\n"
            "korovod_requests_total 3\n"
            "# HELP korovod_temperature Line one\\nback\\\\slash\n"
            "# TYPE korovod_temperature gauge\n"
            "korovod_temperature{path=\"a\\\"b\\\\c\\nd\"} 1.5\n"
            "korovod_temperature{path=\"plain\"} -2\n");
}

TEST(MetricsRegistryTest, HistogramWithoutLabelsAndEmptyBuckets) {
  MetricsRegistry r;
  Must(r.GetHistogram("h_seconds", "", {0.5, 1}));
  // No HELP line for an empty help text; a histogram with no observations renders zeros.
  EXPECT_EQ(r.Render(),
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.5\"} 0\n"
            "h_seconds_bucket{le=\"1\"} 0\n"
            "h_seconds_bucket{le=\"+Inf\"} 0\n"
            "h_seconds_sum 0\n"
            "h_seconds_count 0\n");
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeAndInclusive) {
  Histogram h({1, 2, 4});
  for (double v : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 100.0}) h.Observe(v);
  Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{2, 4, 6, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.sum, 117.0);
}

TEST(MetricsRegistryTest, SameSeriesSameObjectWhateverTheLabelOrder) {
  MetricsRegistry r;
  Counter* a = Must(r.GetCounter("c_total", "C.", {{"b", "1"}, {"a", "2"}}));
  Counter* b = Must(r.GetCounter("c_total", "C.", {{"a", "2"}, {"b", "1"}}));
  Counter* other = Must(r.GetCounter("c_total", "C.", {{"a", "3"}, {"b", "1"}}));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  a->Increment();
  b->Increment(2.5);
  other->Increment(-1);  // ignored: counters never go down
  // Labels render in first-registration order; series sorted by label values.
  EXPECT_EQ(r.Render(),
            "# HELP c_total C.\n"
            "# TYPE c_total counter\n"
            "c_total{b=\"1\",a=\"2\"} 3.5\n"
            "c_total{b=\"1\",a=\"3\"} 0\n");
}

TEST(MetricsRegistryTest, RejectsBadRegistrations) {
  MetricsRegistry r;
  EXPECT_EQ(r.GetCounter("9bad", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetCounter("bad-name", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetGauge("g", "", {{"__reserved", "x"}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetGauge("g", "", {{"a", "x"}, {"a", "y"}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetHistogram("h", "", {1, 2}, {{"le", "x"}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetHistogram("h", "", {2, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.GetHistogram("h", "", {1, std::numeric_limits<double>::infinity()}).status().code(),
            StatusCode::kInvalidArgument);

  ASSERT_TRUE(r.GetCounter("x_total", "", {{"k", "v"}}).ok());
  Status type = r.GetGauge("x_total", "").status();
  EXPECT_EQ(type.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(type.message().find("already registered as a counter"), std::string::npos)
      << type.message();
  Status labels = r.GetCounter("x_total", "", {{"other", "v"}}).status();
  EXPECT_EQ(labels.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(labels.message().find("{k}"), std::string::npos) << labels.message();
  EXPECT_EQ(r.GetCounter("x_total", "").status().code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(r.GetHistogram("y_seconds", "", {1, 2}).ok());
  EXPECT_EQ(r.GetHistogram("y_seconds", "", {1, 3}).status().code(), StatusCode::kInvalidArgument);
  // The failed attempts left nothing half-registered behind.
  EXPECT_EQ(r.Render().find("# TYPE h "), std::string::npos);
  EXPECT_EQ(r.Render().find("# TYPE g "), std::string::npos);
}

TEST(MetricsRegistryTest, FormatsValuesAsPrometheusParsesThem) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(1e12), "1000000000000");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(1e-5), "1e-05");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");
}

TEST(MetricsRegistryTest, ConcurrentUpdatesFromFourThreadsSumCorrectly) {
  MetricsRegistry r;
  constexpr int kThreads = 4;
  constexpr int kIters = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&r, t] {
      for (int i = 0; i < kIters; ++i) {
        // Looked up every time, so registration races with updates and rendering too.
        Must(r.GetCounter("ops_total", "Ops."))->Increment();
        Must(r.GetCounter("bytes_total", "B.", {{"thread", std::to_string(t)}}))->Increment(2);
        Must(r.GetGauge("inflight", "G."))->Add(1);
        Must(r.GetHistogram("lat_seconds", "L.", {0.5}))->Observe(i % 2 == 0 ? 0.25 : 1.0);
        if (i % 10000 == 0) (void)r.Render();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(Must(r.GetCounter("ops_total", "Ops."))->value(), kThreads * kIters);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(Must(r.GetCounter("bytes_total", "B.", {{"thread", std::to_string(t)}}))->value(),
              2.0 * kIters);
  }
  EXPECT_EQ(Must(r.GetGauge("inflight", "G."))->value(), kThreads * kIters);
  Histogram::Snapshot s = Must(r.GetHistogram("lat_seconds", "L.", {0.5}))->snapshot();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kIters));
  EXPECT_EQ(s.cumulative_counts[0], static_cast<uint64_t>(kThreads * kIters / 2));
  EXPECT_DOUBLE_EQ(s.sum, kThreads * (kIters / 2) * 1.25);
  EXPECT_NE(r.Render().find("ops_total 200000\n"), std::string::npos);
}

TEST(MetricsRegistryTest, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

}  // namespace
}  // namespace korovod::http
