#include "common/http/metrics_registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace korovod::http {
namespace {

enum FamilyType { kCounterType = 0, kGaugeType = 1, kHistogramType = 2 };

const char* TypeName(int type) {
  switch (type) {
    case kCounterType:
      return "counter";
    case kGaugeType:
      return "gauge";
    default:
      return "histogram";
  }
}

bool IsValidMetricName(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view n) {
  if (n.empty() || n.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ", ";
    out += names[i];
  }
  return out + "}";
}

// Appends {a="x",b="y"} (plus an optional trailing le label); nothing when there are no labels.
void AppendLabels(std::string& out, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, const std::string* le) {
  if (names.empty() && le == nullptr) return;
  out += '{';
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += EscapeLabelValue(values[i]);
    out += '"';
  }
  if (le != nullptr) {
    if (!names.empty()) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

}  // namespace

void Counter::Increment(double v) {
  if (!(v >= 0)) return;
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  // Bucket i counts upper_bounds_[i-1] < v <= upper_bounds_[i]; NaN lands in +Inf only.
  size_t i =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  if (std::isnan(v)) i = upper_bounds_.size();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  s.cumulative_counts.reserve(counts_.size());
  uint64_t total = 0;
  for (uint64_t c : counts_) {
    total += c;
    s.cumulative_counts.push_back(total);
  }
  s.count = total;
  s.sum = sum_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double b = start;
  for (int i = 0; i < count; ++i) {
    out.push_back(b);
    b *= factor;
  }
  return out;
}

struct MetricsRegistry::Family {
  std::string name;
  std::string help;
  int type = kCounterType;
  std::vector<std::string> label_names;
  std::vector<double> bounds;
  // Keyed by label values in label_names order, so series render sorted by them.
  std::map<std::vector<std::string>, std::unique_ptr<Counter>> counters;
  std::map<std::vector<std::string>, std::unique_ptr<Gauge>> gauges;
  std::map<std::vector<std::string>, std::unique_ptr<Histogram>> histograms;

  // Label values in label_names order, or InvalidArgument if `labels` has other names.
  StatusOr<std::vector<std::string>> Resolve(const Labels& labels) const {
    std::vector<std::string> values(label_names.size());
    std::vector<bool> seen(label_names.size(), false);
    bool match = labels.size() == label_names.size();
    for (const auto& [k, v] : labels) {
      auto it = std::find(label_names.begin(), label_names.end(), k);
      if (it == label_names.end() || seen[it - label_names.begin()]) {
        match = false;
        break;
      }
      seen[it - label_names.begin()] = true;
      values[it - label_names.begin()] = v;
    }
    if (!match) {
      std::vector<std::string> given;
      for (const auto& kv : labels) given.push_back(kv.first);
      return InvalidArgument("metric " + name + " has labels " + JoinNames(label_names) + ", got " +
                             JoinNames(given));
    }
    return values;
  }
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

StatusOr<MetricsRegistry::Family*> MetricsRegistry::GetFamily(std::string_view name,
                                                              std::string_view help, int type,
                                                              const Labels& labels,
                                                              const std::vector<double>* bounds) {
  // Called with mu_ held.
  auto it = families_.find(name);
  if (it != families_.end()) {
    Family* f = it->second.get();
    if (f->type != type) {
      return InvalidArgument("metric " + f->name + " is already registered as a " +
                             TypeName(f->type) + ", not a " + TypeName(type));
    }
    if (bounds != nullptr && *bounds != f->bounds) {
      return InvalidArgument("histogram " + f->name +
                             " is already registered with other bucket bounds");
    }
    return f;
  }
  std::string n(name);
  if (!IsValidMetricName(n)) {
    return InvalidArgument("invalid metric name \"" + n + "\" (want [a-zA-Z_:][a-zA-Z0-9_:]*)");
  }
  auto f = std::make_unique<Family>();
  f->name = n;
  f->help = std::string(help);
  f->type = type;
  std::set<std::string> names;
  for (const auto& kv : labels) {
    if (!IsValidLabelName(kv.first)) {
      return InvalidArgument("metric " + n + ": invalid label name \"" + kv.first +
                             "\" (want [a-zA-Z_][a-zA-Z0-9_]*, not starting with __)");
    }
    if (type == kHistogramType && kv.first == "le") {
      return InvalidArgument("histogram " + n + ": label name \"le\" is reserved for buckets");
    }
    if (!names.insert(kv.first).second) {
      return InvalidArgument("metric " + n + ": label \"" + kv.first + "\" given twice");
    }
    f->label_names.push_back(kv.first);
  }
  if (bounds != nullptr) {
    for (size_t i = 0; i < bounds->size(); ++i) {
      double b = (*bounds)[i];
      if (!std::isfinite(b) || (i > 0 && !(b > (*bounds)[i - 1]))) {
        return InvalidArgument("histogram " + n +
                               ": bucket bounds must be finite and strictly increasing");
      }
    }
    f->bounds = *bounds;
  }
  Family* raw = f.get();
  families_.emplace(n, std::move(f));
  return raw;
}

StatusOr<Counter*> MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                               const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  KV_ASSIGN_OR_RETURN(Family * f, GetFamily(name, help, kCounterType, labels, nullptr));
  KV_ASSIGN_OR_RETURN(std::vector<std::string> values, f->Resolve(labels));
  auto& slot = f->counters[std::move(values)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

StatusOr<Gauge*> MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                           const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  KV_ASSIGN_OR_RETURN(Family * f, GetFamily(name, help, kGaugeType, labels, nullptr));
  KV_ASSIGN_OR_RETURN(std::vector<std::string> values, f->Resolve(labels));
  auto& slot = f->gauges[std::move(values)];
  if (!slot) slot = std::make_unique<Gauge>();
  return slot.get();
}

StatusOr<Histogram*> MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                                   std::vector<double> upper_bounds,
                                                   const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  KV_ASSIGN_OR_RETURN(Family * f, GetFamily(name, help, kHistogramType, labels, &upper_bounds));
  KV_ASSIGN_OR_RETURN(std::vector<std::string> values, f->Resolve(labels));
  auto& slot = f->histograms[std::move(values)];
  if (!slot) slot = std::make_unique<Histogram>(f->bounds);
  return slot.get();
}

std::string MetricsRegistry::Render() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, f] : families_) {
    if (f->counters.empty() && f->gauges.empty() && f->histograms.empty()) continue;
    if (!f->help.empty()) {
      out += "# HELP " + name + " " + EscapeHelp(f->help) + "\n";
    }
    out += "# TYPE " + name + " " + TypeName(f->type) + "\n";
    auto sample = [&](const std::string& sample_name, const std::vector<std::string>& values,
                      const std::string* le, const std::string& value) {
      out += sample_name;
      AppendLabels(out, f->label_names, values, le);
      out += ' ';
      out += value;
      out += '\n';
    };
    for (const auto& [values, c] : f->counters) {
      sample(name, values, nullptr, FormatMetricValue(c->value()));
    }
    for (const auto& [values, g] : f->gauges) {
      sample(name, values, nullptr, FormatMetricValue(g->value()));
    }
    for (const auto& [values, h] : f->histograms) {
      Histogram::Snapshot s = h->snapshot();
      for (size_t i = 0; i < s.cumulative_counts.size(); ++i) {
        std::string le =
            i < s.upper_bounds.size() ? FormatMetricValue(s.upper_bounds[i]) : std::string("+Inf");
        sample(name + "_bucket", values, &le, std::to_string(s.cumulative_counts[i]));
      }
      sample(name + "_sum", values, nullptr, FormatMetricValue(s.sum));
      sample(name + "_count", values, nullptr, std::to_string(s.count));
    }
  }
  return out;
}

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::to_chars_result r;
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), v);
  }
  return std::string(buf, r.ptr);
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace korovod::http
