#include "bench/gradbench_report.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace korovod::bench {
namespace {

std::string Str(const Row& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_string() ? it->get<std::string>() : "";
}

double Num(const Row& r, const char* key, double fallback = NAN) {
  auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : fallback;
}

double ExtraNum(const Row& r, const char* key) {
  auto it = r.find("extra");
  if (it == r.end() || !it->is_object()) return NAN;
  return Num(*it, key);
}

std::string Fmt(const char* fmt, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string Mib(double bytes) { return Fmt("%.1f MiB", bytes / (1 << 20)); }

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One table line: every repeat of (model, gap, peer, transport, mode).
struct Cell {
  std::string model, peer, transport, mode;
  double gap = 0;
  std::vector<const Row*> rows;
  std::vector<double> Values(const char* key, bool extra = false) const {
    std::vector<double> v;
    for (const Row* r : rows) {
      if (r->contains("error")) continue;
      const double x = extra ? ExtraNum(*r, key) : Num(*r, key);
      if (!std::isnan(x)) v.push_back(x);
    }
    return v;
  }
  double Median(const char* key, bool extra = false) const {
    return bench::Median(Values(key, extra));
  }
};

std::vector<Cell> Cells(const std::vector<Row>& rows) {
  std::vector<Cell> cells;
  for (const Row& r : rows) {
    Cell key{Str(r, "model"), Str(r, "peer"),      Str(r, "transport"),
             Str(r, "mode"),  Num(r, "gap_us", 0), {}};
    auto it = std::find_if(cells.begin(), cells.end(), [&](const Cell& c) {
      return c.model == key.model && c.peer == key.peer && c.transport == key.transport &&
             c.mode == key.mode && c.gap == key.gap;
    });
    if (it == cells.end()) it = cells.insert(cells.end(), key);
    it->rows.push_back(&r);
  }
  return cells;
}

// Median over repeats of the median step time, NaN if absent.
double TimeOf(const std::vector<Cell>& cells, const std::string& model, double gap,
              const std::string& peer, const std::string& transport, const std::string& mode) {
  for (const Cell& c : cells) {
    if (c.model == model && c.gap == gap && c.peer == peer && c.transport == transport &&
        c.mode == mode) {
      return c.Median("time_us");
    }
  }
  return NAN;
}

// "512.3" or, over repeats, "512.3 [498.0-530.1]" (ms).
std::string MsCell(const std::vector<double>& us) {
  if (us.empty()) return "-";
  std::string s = Fmt("%.1f", Median(us) / 1e3);
  if (us.size() > 1) {
    s += " [" + Fmt("%.1f", *std::min_element(us.begin(), us.end()) / 1e3) + "-" +
         Fmt("%.1f", *std::max_element(us.begin(), us.end()) / 1e3) + "]";
  }
  return s;
}

}  // namespace

Row StepRow(const std::string& peer, const std::string& transport, int ranks, uint64_t bytes,
            const StepTimes& t, int steps, int warmup, const std::string& algo) {
  auto us = [](double s) { return std::round(s * 1e9) / 1e3; };
  const double algbw = t.median > 0 ? static_cast<double>(bytes) / t.median / 1e9 : 0;
  Row r;
  r["peer"] = peer;
  r["transport"] = transport;
  r["ranks"] = ranks;
  r["bytes"] = bytes;
  r["time_us"] = us(t.median);
  r["algbw_gbps"] = algbw;
  r["busbw_gbps"] = algbw * 2.0 * (ranks - 1) / ranks;
  r["time_us_min"] = us(t.min);
  r["time_us_mean"] = us(t.mean);
  r["time_us_p90"] = us(t.p90);
  r["iters"] = steps;
  r["warmup"] = warmup;
  r["algo"] = algo;
  return r;
}

std::vector<Row> ParseRows(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] != '{') continue;
    Row r = Row::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_object() && r.contains("peer")) rows.push_back(std::move(r));
  }
  return rows;
}

void PrintTable(const std::vector<Row>& rows, FILE* out) {
  const std::vector<Cell> cells = Cells(rows);
  // Groups in order of first appearance: (model, gap).
  std::vector<std::pair<std::string, double>> groups;
  for (const Cell& c : cells) {
    std::pair<std::string, double> g{c.model, c.gap};
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  for (const auto& [model, gap] : groups) {
    const Row* any = nullptr;
    int repeats = 0;
    for (const Cell& c : cells) {
      if (c.model != model || c.gap != gap) continue;
      if (any == nullptr) any = c.rows.front();
      repeats = std::max(repeats, static_cast<int>(c.rows.size()));
    }
    std::fprintf(out,
                 "\n%s, %s tensors, %s of float32 gradients per rank per step, %d ranks, compute "
                 "gap %g us per tensor\n",
                 model.c_str(), Fmt("%.0f", Num(*any, "tensors")).c_str(),
                 Mib(Num(*any, "bytes")).c_str(), static_cast<int>(Num(*any, "ranks", 0)), gap);
    std::fprintf(out,
                 "exposed communication per step (step time - compute gap slept), max over "
                 "ranks, median of %s timed steps%s\n",
                 Fmt("%.0f", Num(*any, "iters")).c_str(),
                 repeats > 1 ? "; median [min-max] over launches" : "");
    std::fprintf(out,
                 "| peer/transport | mode | median ms | p90 ms | busbw GB/s | collectives/step | "
                 "cache hits/step | negotiation %% | fusion threshold | cycle ms | foreign cpu "
                 "%% |\n");
    std::fprintf(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Cell& c : cells) {
      if (c.model != model || c.gap != gap) continue;
      const std::string who = c.peer + "/" + c.transport;
      for (const Row* r : c.rows) {
        if (r->contains("error")) {
          std::fprintf(out, "| %s | %s | %s | | | | | | | | |\n", who.c_str(), c.mode.c_str(),
                       Str(*r, "error").c_str());
        }
      }
      if (c.Values("time_us").empty()) continue;
      const double thr = c.Median("fusion_threshold_bytes", true);
      const double foreign = bench::Median(c.Values("foreign_cpu_frac"));
      std::fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", who.c_str(),
                   c.mode.c_str(), MsCell(c.Values("time_us")).c_str(),
                   Fmt("%.1f", c.Median("time_us_p90") / 1e3).c_str(),
                   Fmt("%.3f", c.Median("busbw_gbps")).c_str(),
                   Fmt("%.1f", c.Median("collectives_per_step", true)).c_str(),
                   Fmt("%.1f", c.Median("cache_hits_per_step", true)).c_str(),
                   Fmt("%.1f", 100 * c.Median("negotiation_frac", true)).c_str(),
                   std::isnan(thr) ? "-"
                   : thr == 0      ? "0 (off)"
                                   : Mib(thr).c_str(),
                   Fmt("%.2f", c.Median("cycle_time_ms", true)).c_str(),
                   Fmt("%.0f", 100 * foreign).c_str());
    }
  }

  std::fprintf(out,
               "\nSpeedups (ratio of median exposed communication per step; > 1: the second is "
               "faster)\n");
  std::fprintf(out,
               "| model | gap us | transport | fusion on vs off (off/on) | autotune vs off "
               "(off/autotune) | autotune vs on (on/autotune) |\n");
  std::fprintf(out, "|---|---:|---|---:|---:|---:|\n");
  for (const auto& [model, gap] : groups) {
    std::vector<std::string> transports;
    for (const Cell& c : cells) {
      if (c.peer != "korovod" || c.model != model || c.gap != gap) continue;
      if (std::find(transports.begin(), transports.end(), c.transport) == transports.end()) {
        transports.push_back(c.transport);
      }
    }
    for (const std::string& t : transports) {
      const double off = TimeOf(cells, model, gap, "korovod", t, "off");
      const double on = TimeOf(cells, model, gap, "korovod", t, "on");
      const double at = TimeOf(cells, model, gap, "korovod", t, "autotune");
      std::fprintf(out, "| %s | %g | korovod/%s | %s | %s | %s |\n", model.c_str(), gap, t.c_str(),
                   Fmt("%.2fx", off / on).c_str(), Fmt("%.2fx", off / at).c_str(),
                   Fmt("%.2fx", on / at).c_str());
    }
    const double per = TimeOf(cells, model, gap, "torch-gloo", "tcp", "per-tensor");
    const double bucketed = TimeOf(cells, model, gap, "torch-gloo", "tcp", "bucketed");
    if (!std::isnan(per) || !std::isnan(bucketed)) {
      std::fprintf(out, "| %s | %g | torch-gloo/tcp | %s (bucketed vs per-tensor) | | |\n",
                   model.c_str(), gap, Fmt("%.2fx", per / bucketed).c_str());
      const double kon = TimeOf(cells, model, gap, "korovod", "tcp", "on");
      const double koff = TimeOf(cells, model, gap, "korovod", "tcp", "off");
      const double kat = TimeOf(cells, model, gap, "korovod", "tcp", "autotune");
      if (!std::isnan(kon) || !std::isnan(koff)) {
        std::fprintf(out,
                     "| %s | %g | korovod/tcp vs torch-gloo/tcp (torch/korovod) | on vs bucketed "
                     "%s | autotune vs bucketed %s | off vs per-tensor %s |\n",
                     model.c_str(), gap, Fmt("%.2fx", bucketed / kon).c_str(),
                     Fmt("%.2fx", bucketed / kat).c_str(), Fmt("%.2fx", per / koff).c_str());
      }
    }
  }
}

}  // namespace korovod::bench
