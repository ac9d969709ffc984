#include "runtime/core/autotune/autotuner.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/autotune/param_space.h"

namespace korovod {
namespace {

namespace fs = std::filesystem;

// A private directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "korovod_autotune_XXXXXX").string();
    const char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct CsvRow {
  std::string trial;
  TunableParams params;
  double score = 0;
  int best = 0;
};

struct Csv {
  std::string header;
  std::vector<CsvRow> rows;
};

Csv ReadCsv(const fs::path& path) {
  Csv csv;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::getline(in, csv.header);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    EXPECT_EQ(cells.size(), 7u) << line;
    if (cells.size() != 7) continue;
    CsvRow row;
    row.trial = cells[0];
    row.params.fusion_threshold_bytes = std::stoll(cells[1]);
    row.params.cycle_time_ms = std::stod(cells[2]);
    row.params.small_allreduce_max_bytes = std::stoll(cells[3]);
    row.params.tcp_stripe_min_bytes = std::stoll(cells[4]);
    row.score = std::stod(cells[5]);
    row.best = std::stoi(cells[6]);
    csv.rows.push_back(row);
  }
  return csv;
}

bool SameParams(const TunableParams& a, const TunableParams& b) {
  return a.fusion_threshold_bytes == b.fusion_threshold_bytes &&
         a.cycle_time_ms == b.cycle_time_ms &&
         a.small_allreduce_max_bytes == b.small_allreduce_max_bytes &&
         a.tcp_stripe_min_bytes == b.tcp_stripe_min_bytes;
}

constexpr double kOptimalFusion = 32 << 20;
constexpr double kOptimalCycleMs = 2.0;

// Synthetic engine: throughput peaks at 32 MiB fusion and 2 ms cycle time (a Gaussian in log2 of
// each), with a mild preference for a 64 KiB small-allreduce crossover and a 1 MiB stripe size.
double Throughput(const TunableParams& p) {
  auto bump = [](double value, double best, double width) {
    const double d = std::log2(value / best) / width;
    return std::exp(-0.5 * d * d);
  };
  return 10e9 * bump(static_cast<double>(p.fusion_threshold_bytes), kOptimalFusion, 1.5) *
         bump(p.cycle_time_ms, kOptimalCycleMs, 1.5) *
         (0.9 + 0.1 * bump(static_cast<double>(p.small_allreduce_max_bytes), 64 << 10, 2.0)) *
         (0.9 + 0.1 * bump(static_cast<double>(p.tcp_stripe_min_bytes), 1 << 20, 2.0));
}

// Feeds the autotuner cycles of the synthetic engine (with 2% noise and an idle cycle every
// fourth) until it settles; returns how many times Record reported a change.
int RunUntilSettled(Autotuner& tuner, uint64_t noise_seed, std::vector<TunableParams>* trials) {
  std::mt19937_64 rng(noise_seed);
  std::normal_distribution<double> noise(1.0, 0.02);
  int changes = 0;
  if (trials) trials->push_back(tuner.current());
  for (int cycle = 0; cycle < 1000000 && !tuner.settled(); ++cycle) {
    const uint64_t bytes = cycle % 4 == 3 ? 0 : 64 << 20;
    const double seconds =
        bytes == 0 ? 1e-4 : static_cast<double>(bytes) / (Throughput(tuner.current()) * noise(rng));
    if (tuner.Record(bytes, seconds)) {
      ++changes;
      if (trials && !tuner.settled()) trials->push_back(tuner.current());
    }
  }
  return changes;
}

TEST(Autotuner, WarmupDiscardedAndTrialScoreIsMedianOfSamples) {
  TempDir dir;
  AutotuneOptions o;
  o.log_path = (dir / "autotune.csv").string();
  o.warmup_samples = 2;
  o.cycles_per_sample = 4;
  o.samples_per_trial = 3;
  o.max_trials = 5;
  auto tuner = Autotuner::Create(o);
  ASSERT_TRUE(tuner.ok()) << tuner.status().ToString();
  const TunableParams initial = (*tuner)->current();
  EXPECT_TRUE(SameParams(initial, o.initial));

  // Warm-up: two samples at a wildly different rate; none of them may count.
  for (int i = 0; i < 2 * 4; ++i) EXPECT_FALSE((*tuner)->Record(1, 1000.0));
  // Three samples; each is 4 cycles of 1000 bytes in 1 s plus an idle cycle whose time counts:
  // 4000 B / (4 + idle) s. Idle 1, 0 and 4 s: 800, 1000 and 500 B/s; median 800.
  const double idle[3] = {1.0, 0.0, 4.0};
  bool changed = false;
  for (int s = 0; s < 3; ++s) {
    EXPECT_FALSE((*tuner)->Record(0, idle[s]));
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ((*tuner)->trials(), 0);
      changed = (*tuner)->Record(1000, 1.0);
      if (!(s == 2 && c == 3)) {
        EXPECT_FALSE(changed) << "sample " << s << " cycle " << c;
      }
    }
  }
  EXPECT_TRUE(changed);
  EXPECT_EQ((*tuner)->trials(), 1);
  EXPECT_FALSE((*tuner)->settled());

  const Csv csv = ReadCsv(o.log_path);  // flushed per row: readable while the tuner runs
  ASSERT_EQ(csv.rows.size(), 1u);
  EXPECT_EQ(csv.rows[0].trial, "1");
  EXPECT_TRUE(SameParams(csv.rows[0].params, initial));
  EXPECT_DOUBLE_EQ(csv.rows[0].score, 800.0);
  EXPECT_EQ(csv.rows[0].best, 1);
}

TEST(Autotuner, SettlesNearOptimumAndLogsEveryTrial) {
  TempDir dir;
  AutotuneOptions o;
  o.log_path = (dir / "trials.csv").string();
  o.warmup_samples = 3;
  o.cycles_per_sample = 5;
  o.samples_per_trial = 3;
  o.max_trials = 24;
  o.seed = 1;
  auto created = Autotuner::Create(o);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Autotuner& tuner = **created;

  std::vector<TunableParams> trials;
  const int changes = RunUntilSettled(tuner, 99, &trials);
  EXPECT_EQ(changes, o.max_trials);  // a new trial after each but the last, then the settling
  EXPECT_TRUE(tuner.settled());
  EXPECT_EQ(tuner.trials(), o.max_trials);
  ASSERT_EQ(trials.size(), static_cast<size_t>(o.max_trials));

  // Settled: nothing changes any more.
  const TunableParams final_params = tuner.current();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(tuner.Record(64 << 20, 0.01));
  EXPECT_TRUE(SameParams(tuner.current(), final_params));
  EXPECT_EQ(tuner.trials(), o.max_trials);

  // Near the optimum: within a factor of 1.5 in fusion threshold and cycle time (the search
  // space spans a factor of 256 and 80), and close to the peak throughput.
  const double within = std::log2(1.5);
  EXPECT_LT(std::abs(std::log2(final_params.fusion_threshold_bytes / kOptimalFusion)), within)
      << final_params.fusion_threshold_bytes;
  EXPECT_LT(std::abs(std::log2(final_params.cycle_time_ms / kOptimalCycleMs)), within)
      << final_params.cycle_time_ms;
  EXPECT_GT(Throughput(final_params), 0.85 * 10e9);

  // Every suggested trial lies within the bounds, rounded to its quantum.
  for (size_t i = 1; i < trials.size(); ++i) {
    const TunableParams& p = trials[i];
    EXPECT_GE(p.fusion_threshold_bytes, 1 << 20);
    EXPECT_LE(p.fusion_threshold_bytes, 256 << 20);
    EXPECT_EQ(p.fusion_threshold_bytes % (64 << 10), 0);
    EXPECT_GE(p.cycle_time_ms, 0.25);
    EXPECT_LE(p.cycle_time_ms, 20.0);
    EXPECT_GE(p.small_allreduce_max_bytes, 4 << 10);
    EXPECT_LE(p.small_allreduce_max_bytes, 512 << 10);
    EXPECT_GE(p.tcp_stripe_min_bytes, 64 << 10);
    EXPECT_LE(p.tcp_stripe_min_bytes, 8 << 20);
  }

  // The CSV: header, one row per trial with the parameters it ran, and the final choice.
  const Csv csv = ReadCsv(o.log_path);
  EXPECT_EQ(csv.header,
            "trial,fusion_threshold_bytes,cycle_time_ms,small_allreduce_max_bytes,"
            "tcp_stripe_min_bytes,score_bytes_per_sec,best");
  ASSERT_EQ(csv.rows.size(), static_cast<size_t>(o.max_trials + 1));
  double best_score = 0.0;
  size_t best_row = 0;
  for (int i = 0; i < o.max_trials; ++i) {
    const CsvRow& row = csv.rows[i];
    EXPECT_EQ(row.trial, std::to_string(i + 1));
    EXPECT_TRUE(SameParams(row.params, trials[i])) << "trial " << i + 1;
    EXPECT_GT(row.score, 0.0);
    EXPECT_EQ(row.best, row.score > best_score ? 1 : 0) << "trial " << i + 1;
    if (row.score > best_score) {
      best_score = row.score;
      best_row = i;
    }
  }
  const CsvRow& last = csv.rows.back();
  EXPECT_EQ(last.trial, "final");
  EXPECT_TRUE(SameParams(last.params, tuner.current()));
  EXPECT_TRUE(SameParams(last.params, csv.rows[best_row].params));
  EXPECT_DOUBLE_EQ(last.score, best_score);
  EXPECT_EQ(last.best, 1);

  struct stat st {};
  ASSERT_EQ(::stat(o.log_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(Autotuner, ReproducibleFromSeedWithoutLog) {
  AutotuneOptions o;
  o.warmup_samples = 0;
  o.cycles_per_sample = 2;
  o.samples_per_trial = 1;
  o.max_trials = 10;
  auto run = [&](uint64_t seed) {
    o.seed = seed;
    auto tuner = Autotuner::Create(o);
    EXPECT_TRUE(tuner.ok());
    std::vector<TunableParams> trials;
    RunUntilSettled(**tuner, 5, &trials);
    EXPECT_TRUE((*tuner)->settled());
    std::vector<double> flat;
    for (const auto& p : trials) {
      flat.insert(flat.end(), {static_cast<double>(p.fusion_threshold_bytes), p.cycle_time_ms,
                               static_cast<double>(p.small_allreduce_max_bytes),
                               static_cast<double>(p.tcp_stripe_min_bytes)});
    }
    return flat;
  };
  EXPECT_EQ(run(3), run(3));
  EXPECT_NE(run(3), run(4));
}

TEST(Autotuner, SingleTrialSettlesOnInitialParams) {
  AutotuneOptions o;
  o.warmup_samples = 0;
  o.cycles_per_sample = 1;
  o.samples_per_trial = 1;
  o.max_trials = 1;
  o.initial.fusion_threshold_bytes = 0;  // outside the search bounds: still run and kept as is
  auto tuner = Autotuner::Create(o);
  ASSERT_TRUE(tuner.ok());
  EXPECT_TRUE((*tuner)->Record(100, 1.0));
  EXPECT_TRUE((*tuner)->settled());
  EXPECT_TRUE(SameParams((*tuner)->current(), o.initial));
  EXPECT_FALSE((*tuner)->Record(100, 1.0));
}

TEST(Autotuner, ParamSpaceMapsLogScaleWithinBounds) {
  using autotune::ParamsFromPoint;
  using autotune::PointFromParams;
  const TunableParams lo = ParamsFromPoint(std::vector<double>{0, 0, 0, 0});
  EXPECT_EQ(lo.fusion_threshold_bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(lo.cycle_time_ms, 0.25);
  EXPECT_EQ(lo.small_allreduce_max_bytes, 4 << 10);
  EXPECT_EQ(lo.tcp_stripe_min_bytes, 64 << 10);
  const TunableParams hi = ParamsFromPoint(std::vector<double>{1, 1, 1, 1});
  EXPECT_EQ(hi.fusion_threshold_bytes, 256 << 20);
  EXPECT_DOUBLE_EQ(hi.cycle_time_ms, 20.0);
  EXPECT_EQ(hi.small_allreduce_max_bytes, 512 << 10);
  EXPECT_EQ(hi.tcp_stripe_min_bytes, 8 << 20);
  // Halfway on the log scale is the geometric mean: 16 MiB, sqrt(5) ms, 45.25 KiB, 724 KiB.
  const TunableParams mid = ParamsFromPoint(std::vector<double>{0.5, 0.5, 0.5, 0.5});
  EXPECT_EQ(mid.fusion_threshold_bytes, 16 << 20);
  EXPECT_NEAR(mid.cycle_time_ms, std::sqrt(5.0), 1e-12);
  EXPECT_EQ(mid.small_allreduce_max_bytes % 256, 0);
  EXPECT_NEAR(mid.small_allreduce_max_bytes, std::sqrt(4.0 * 512) * 1024, 256);
  EXPECT_EQ(mid.tcp_stripe_min_bytes % 4096, 0);
  EXPECT_NEAR(mid.tcp_stripe_min_bytes, std::sqrt(64.0 * 8192) * 1024, 4096);
  // Round trip of an in-bounds point, and clamping of out-of-bounds parameters.
  const std::vector<double> back = PointFromParams(mid);
  for (double v : back) EXPECT_NEAR(v, 0.5, 0.01);
  TunableParams wild;
  wild.fusion_threshold_bytes = 0;
  wild.cycle_time_ms = 100;
  const std::vector<double> clamped = PointFromParams(wild);
  EXPECT_EQ(clamped[0], 0.0);
  EXPECT_EQ(clamped[1], 1.0);
}

void ExpectRejected(const AutotuneOptions& o, const std::string& field) {
  auto tuner = Autotuner::Create(o);
  ASSERT_FALSE(tuner.ok()) << field;
  EXPECT_EQ(tuner.status().code(), StatusCode::kInvalidArgument) << tuner.status().ToString();
  EXPECT_NE(tuner.status().message().find(field), std::string::npos)
      << "message '" << tuner.status().message() << "' does not name " << field;
}

TEST(Autotuner, RejectsBadOptionsNamingTheField) {
  {
    AutotuneOptions o;
    o.warmup_samples = -1;
    ExpectRejected(o, "warmup_samples");
  }
  {
    AutotuneOptions o;
    o.cycles_per_sample = 0;
    ExpectRejected(o, "cycles_per_sample");
  }
  {
    AutotuneOptions o;
    o.samples_per_trial = 0;
    ExpectRejected(o, "samples_per_trial");
  }
  {
    AutotuneOptions o;
    o.max_trials = -3;
    ExpectRejected(o, "max_trials");
  }
  {
    AutotuneOptions o;
    o.initial.cycle_time_ms = 0.0;
    ExpectRejected(o, "cycle_time_ms");
  }
  {
    AutotuneOptions o;
    o.initial.fusion_threshold_bytes = -1;
    ExpectRejected(o, "fusion_threshold_bytes");
  }
  {
    AutotuneOptions o;
    o.initial.small_allreduce_max_bytes = -1;
    ExpectRejected(o, "small_allreduce_max_bytes");
  }
  {
    AutotuneOptions o;
    o.initial.tcp_stripe_min_bytes = -1;
    ExpectRejected(o, "tcp_stripe_min_bytes");
  }
  AutotuneOptions defaults;
  EXPECT_TRUE(Autotuner::Create(defaults).ok());
}

TEST(Autotuner, RejectsUnusableLogPathNamingIt) {
  TempDir dir;
  {
    AutotuneOptions o;
    o.log_path = (dir / "missing" / "autotune.csv").string();
    ExpectRejected(o, "log_path");
    ExpectRejected(o, o.log_path);
    EXPECT_FALSE(fs::exists(dir / "missing"));
  }
  {
    AutotuneOptions o;
    o.log_path = dir.path().string();  // a directory, not a file
    ExpectRejected(o, "log_path");
    ExpectRejected(o, o.log_path);
  }
  {
    // A relative name lives in the working directory, which exists.
    const fs::path cwd = fs::current_path();
    fs::current_path(dir.path());
    AutotuneOptions o;
    o.log_path = "relative.csv";
    auto tuner = Autotuner::Create(o);
    fs::current_path(cwd);
    ASSERT_TRUE(tuner.ok()) << tuner.status().ToString();
    EXPECT_TRUE(fs::exists(dir / "relative.csv"));
  }
}

}  // namespace
}  // namespace korovod
