// MetricsRegistry: counters, gauges and fixed-bucket histograms with labels, rendered in the
// Prometheus text exposition format 0.0.4 for the sidecar's /metrics endpoint.
//
// A metric family is a name with a type, a help text and a fixed set of label names; a series is
// one family with label values. Getting a series registers it on first use and returns the same
// object afterwards, owned by the registry and valid for its lifetime, so hot paths look it up
// once and update it lock-free (counters, gauges) or under a per-series mutex (histograms).
// Everything here is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace korovod::http {

// Label name/value pairs of one series. Order does not matter for identity; it is rendered in the
// order the family was first registered with.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing value.
class Counter {
 public:
  // Adds `v`; negative or NaN increments are ignored (a counter never goes down).
  void Increment(double v = 1.0);
  // Mirrors a cumulative count kept elsewhere (e.g. an EngineStats snapshot); the caller keeps it
  // monotonic.
  void Set(double total) { value_.store(total, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (upper bounds inclusive, +Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;         // without +Inf
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
};

// Bucket bounds start, start*factor, ... (count of them); for latency histograms.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The series of family `name` with `labels`, created on first use. InvalidArgument for a name
  // or label name Prometheus does not accept, a name already registered as another type or with
  // other label names or (histograms) other buckets, a histogram label named "le", or bucket
  // bounds that are not finite and strictly increasing. `help` of the first registration is kept.
  StatusOr<Counter*> GetCounter(std::string_view name, std::string_view help,
                                const Labels& labels = {});
  StatusOr<Gauge*> GetGauge(std::string_view name, std::string_view help,
                            const Labels& labels = {});
  StatusOr<Histogram*> GetHistogram(std::string_view name, std::string_view help,
                                    std::vector<double> upper_bounds, const Labels& labels = {});

  // Text exposition format 0.0.4: families sorted by name, each with # HELP and # TYPE, its series
  // sorted by label values; histograms as name_bucket{le=...} (cumulative, ending with +Inf),
  // name_sum and name_count. Families with no series yet are left out.
  std::string Render() const;

  struct Family;

 private:
  StatusOr<Family*> GetFamily(std::string_view name, std::string_view help, int type,
                              const Labels& labels, const std::vector<double>* bounds);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
};

// The Content-Type of Render()'s output.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Formats a sample value the way Prometheus parses it: integers without a fraction ("42"), others
// in the shortest form that round-trips ("0.25", "1e-05"), "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double v);
// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view v);
// Escapes a HELP text: backslash and newline.
std::string EscapeHelp(std::string_view v);

}  // namespace korovod::http
