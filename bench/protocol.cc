#include "bench/protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/sample_stats.h"
#include "common/json_escape.h"
#include "common/log.h"

#ifndef KOROVOD_VERSION
#define KOROVOD_VERSION "unknown"
#endif

namespace korovod::bench {
namespace {

double NowS() {
  using std::chrono::duration;
  using std::chrono::steady_clock;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Only builds the context string on failure: Run() sits in the timed loop.
Status Annotate(Status s, const BenchOp& op, size_t bytes, const char* phase) {
  if (s.ok()) return s;
  return s.WithContext(std::string(op.name()) + " of " + std::to_string(bytes) + " bytes (" +
                       phase + ")");
}

// In-place MAX over ranks, the peers' max_doubles().
Status MaxDoubles(BenchWorld& world, double* v, size_t n) {
  return world.MaxDoubles(v, n).WithContext("max-reduce of " + std::to_string(n) + " doubles");
}

Status Verify(BenchWorld& world, BenchOp& op, size_t bytes, const ProtocolOptions& opts,
              const char* phase, bool* ok) {
  op.FillForVerify();
  KV_RETURN_IF_ERROR(Annotate(op.Run(), op, bytes, phase));
  const CheckResult r = op.Check(opts.inject_fault && world.rank() == 0);
  if (r.bad != 0) {
    KV_LOG(kError, kBench,
           "rank %d: VERIFY FAILED (%s) %s bytes=%zu: %zu/%zu wrong, e.g. [%zu]=%g expected %g",
           world.rank(), phase, op.name(), bytes, r.bad, r.checked, r.first_bad, r.got, r.expected);
  }
  double flag = r.bad != 0 ? 1.0 : 0.0;
  KV_RETURN_IF_ERROR(MaxDoubles(world, &flag, 1));
  *ok = flag == 0.0;
  return OkStatus();
}

void JsonStr(std::string& out, const char* key, const std::string& v) {
  out += "\"";
  out += key;
  out += "\": \"";
  AppendJsonEscaped(out, v);
  out += "\", ";
}

void JsonNum(std::string& out, const char* key, double v, const char* fmt) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  out += "\"";
  out += key;
  out += "\": ";
  out += buf;
  out += ", ";
}

}  // namespace

Status MeasureSize(BenchWorld& world, BenchOp& op, size_t bytes, const ProtocolOptions& opts,
                   Measurement* m) {
  *m = Measurement();
  m->bytes = bytes;
  KV_RETURN_IF_ERROR(op.Prepare(bytes));

  bool ok = false;
  KV_RETURN_IF_ERROR(Verify(world, op, bytes, opts, "pre", &ok));

  // Estimate: t_est = one op, t_it = one barrier-aligned iteration, both max over ranks.
  double est[2] = {0, 0};
  {
    constexpr int kEstimateOps = 3;
    const double t_start = NowS();
    for (int i = 0; i < kEstimateOps; ++i) {
      KV_RETURN_IF_ERROR(world.Barrier().WithContext("barrier (estimate)"));
      const double t0 = NowS();
      KV_RETURN_IF_ERROR(Annotate(op.Run(), op, bytes, "estimate"));
      est[0] += NowS() - t0;
    }
    est[0] /= kEstimateOps;
    est[1] = (NowS() - t_start) / kEstimateOps;
    KV_RETURN_IF_ERROR(MaxDoubles(world, est, 2));
  }
  const double t_est = std::max(est[0], 1e-7);
  const double t_it = std::max(est[1], 1e-7);
  m->warmup =
      static_cast<int>(std::min(1000.0, std::max(1.0, std::ceil(0.2 * opts.target_s / t_it))));
  m->iters = static_cast<int>(
      std::min(static_cast<double>(opts.max_iters),
               std::max(static_cast<double>(opts.min_iters), std::ceil(opts.target_s / t_it))));

  for (int i = 0; i < m->warmup; ++i) {
    KV_RETURN_IF_ERROR(world.Barrier().WithContext("barrier (warm-up)"));
    KV_RETURN_IF_ERROR(Annotate(op.Run(), op, bytes, "warm-up"));
  }

  std::vector<double> t(m->iters);
  for (int i = 0; i < m->iters; ++i) {
    if (Status s = world.Barrier(); !s.ok()) return s.WithContext("barrier (timed)");
    const double t0 = NowS();
    if (Status s = op.Run(); !s.ok()) return Annotate(s, op, bytes, "timed");
    t[i] = NowS() - t0;
  }
  // Per-iteration slowest rank: an op is done when its last rank is done.
  KV_RETURN_IF_ERROR(MaxDoubles(world, t.data(), t.size()));
  const SampleStats st = SampleStatsOf(std::move(t));
  m->median_s = st.median;
  m->min_s = st.min;
  m->mean_s = st.mean;
  m->p90_s = st.p90;

  if (opts.loop) {
    m->loop_iters =
        static_cast<int>(std::min(static_cast<double>(opts.max_iters),
                                  std::max(3.0, std::ceil(0.3 * opts.target_s / t_est))));
    KV_RETURN_IF_ERROR(world.Barrier().WithContext("barrier (loop)"));
    const double t0 = NowS();
    for (int i = 0; i < m->loop_iters; ++i) {
      if (Status s = op.Run(); !s.ok()) return Annotate(s, op, bytes, "loop");
    }
    double t_loop = (NowS() - t0) / m->loop_iters;
    KV_RETURN_IF_ERROR(MaxDoubles(world, &t_loop, 1));
    m->loop_s = t_loop;
  }

  bool ok_post = false;
  KV_RETURN_IF_ERROR(Verify(world, op, bytes, opts, "post", &ok_post));
  m->verified = ok && ok_post;
  op.Release();
  return OkStatus();
}

std::string FormatRow(const RowLabels& labels, const Measurement& m) {
  std::string js = "{";
  JsonStr(js, "peer", "korovod");
  JsonStr(js, "transport", labels.transport);
  JsonNum(js, "ranks", labels.ranks, "%.0f");
  JsonNum(js, "bytes", static_cast<double>(m.bytes), "%.0f");
  if (!m.verified) {
    JsonStr(js, "algo", labels.algo);
    JsonStr(js, "op", labels.op);
    JsonStr(js, "dtype", labels.dtype);
    js += "\"error\": \"verification failed\"}";
    return js;
  }
  const double algbw = static_cast<double>(m.bytes) / m.median_s / 1e9;
  JsonNum(js, "time_us", m.median_s * 1e6, "%.3f");
  JsonNum(js, "algbw_gbps", algbw, "%.6g");
  JsonNum(js, "busbw_gbps", algbw * labels.bus_factor, "%.6g");
  JsonNum(js, "time_us_min", m.min_s * 1e6, "%.3f");
  JsonNum(js, "time_us_mean", m.mean_s * 1e6, "%.3f");
  JsonNum(js, "time_us_p90", m.p90_s * 1e6, "%.3f");
  if (labels.loop) JsonNum(js, "time_us_loop", m.loop_s * 1e6, "%.3f");
  JsonNum(js, "iters", m.iters, "%.0f");
  JsonNum(js, "warmup", m.warmup, "%.0f");
  if (labels.loop) JsonNum(js, "loop_iters", m.loop_iters, "%.0f");
  JsonStr(js, "algo", labels.algo);
  js += labels.inplace ? "\"inplace\": true, " : "\"inplace\": false, ";
  JsonStr(js, "op", labels.op);
  JsonStr(js, "dtype", labels.dtype);
  JsonStr(js, "version", KOROVOD_VERSION);
  js += "\"verified\": true}";
  return js;
}

}  // namespace korovod::bench
