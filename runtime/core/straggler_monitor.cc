#include "runtime/core/straggler_monitor.h"

#include <algorithm>
#include <cstdio>

namespace korovod {

const char* BoundName(StragglerMonitor::Bound b) {
  return b == StragglerMonitor::Bound::kInput ? "input-bound" : "compute-bound";
}

StragglerMonitor::StragglerMonitor(int ranks, std::chrono::microseconds threshold)
    : threshold_(threshold),
      totals_(ranks),
      step_before_(ranks, 0),
      step_after_(ranks, 0),
      started_(ranks, false),
      last_waits_(ranks),
      last_before_(ranks, 0),
      last_after_(ranks, 0) {}

std::vector<StragglerMonitor::Activity> StragglerMonitor::Activities(
    const std::vector<RankView>& views) {
  int in_flight = 0;
  for (const RankView& v : views) in_flight += v.in_flight ? 1 : 0;
  const int n = static_cast<int>(views.size());
  std::vector<Activity> out(n);
  for (int r = 0; r < n; ++r) {
    const RankView& v = views[r];
    const bool other_in_flight = in_flight - (v.in_flight ? 1 : 0) > 0;
    const bool other_idle = (n - in_flight) - (v.in_flight ? 0 : 1) > 0;
    out[r].waited_for = (!v.in_flight && other_in_flight) || (v.in_flight && v.lacks);
    out[r].waiting = v.in_flight && (v.holds || other_idle);
  }
  return out;
}

void StragglerMonitor::Observe(Clock::time_point now, const std::vector<RankView>& views) {
  const int n = ranks();
  if (static_cast<int>(views.size()) != n) return;
  if (have_previous_ && in_step_) {
    // What the previous exchange showed held until this one.
    const double dt = std::chrono::duration<double>(now - previous_at_).count();
    const std::vector<Activity> did = Activities(previous_);
    for (int r = 0; r < n; ++r) {
      if (did[r].waited_for && !started_[r]) {
        step_before_[r] += dt;
        totals_[r].waited_before_first_s += dt;
        totals_[r].others_waited_for_me_s += dt;
      } else if (did[r].waited_for) {
        step_after_[r] += dt;
        totals_[r].waited_after_first_s += dt;
        totals_[r].others_waited_for_me_s += dt;
      }
      if (did[r].waiting) totals_[r].waited_for_others_s += dt;
    }
  }
  bool any = false;
  for (const RankView& v : views) any = any || v.in_flight;
  if (in_step_ && !any) EndStep();
  if (!in_step_ && any) in_step_ = true;
  if (in_step_) {
    for (int r = 0; r < n; ++r) started_[r] = started_[r] || views[r].in_flight;
  }
  previous_ = views;
  previous_at_ = now;
  have_previous_ = true;
}

void StragglerMonitor::EndStep() {
  in_step_ = false;
  ++steps_;
  const int n = ranks();
  int last = -1;
  double most = 0;
  for (int r = 0; r < n; ++r) {
    const double w = step_before_[r] + step_after_[r];
    if (w > most) {
      most = w;
      last = r;
    }
  }
  if (last >= 0 && most * 1e6 > static_cast<double>(threshold_.count())) {
    ++totals_[last].last_steps;
    auto& waits = last_waits_[last];
    if (waits.size() >= 4096) waits.erase(waits.begin());
    waits.push_back(most);
    last_before_[last] += step_before_[last];
    last_after_[last] += step_after_[last];
  }
  std::fill(started_.begin(), started_.end(), false);
  std::fill(step_before_.begin(), step_before_.end(), 0);
  std::fill(step_after_.begin(), step_after_.end(), 0);
}

std::optional<StragglerMonitor::Straggler> StragglerMonitor::FindStraggler(
    uint64_t min_steps) const {
  if (steps_ < std::max<uint64_t>(min_steps, 1)) return std::nullopt;
  for (int r = 0; r < ranks(); ++r) {
    if (2 * totals_[r].last_steps <= steps_) continue;
    Straggler s;
    s.rank = r;
    s.last_steps = totals_[r].last_steps;
    s.steps = steps_;
    std::vector<double> w = last_waits_[r];
    std::sort(w.begin(), w.end());
    s.median_wait_s = w.empty() ? 0 : w[w.size() / 2];
    s.bound = last_before_[r] >= last_after_[r] ? Bound::kInput : Bound::kCompute;
    return s;
  }
  return std::nullopt;
}

std::string StragglerMonitor::StragglerLine(uint64_t min_steps,
                                            const std::function<std::string(int)>& describe) const {
  auto s = FindStraggler(min_steps);
  if (!s) return {};
  const int r = s->rank;
  const double total = last_before_[r] + last_after_[r];
  const double before_pct = total > 0 ? 100.0 * last_before_[r] / total : 0;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "straggler: %s arrived last in %llu of %llu steps, the others waiting %.1f ms "
                "for it (median); %s: %.0f%% of that wait came before its first op of the step "
                "(%s)",
                describe(r).c_str(), static_cast<unsigned long long>(s->last_steps),
                static_cast<unsigned long long>(s->steps), s->median_wait_s * 1e3,
                BoundName(s->bound), before_pct,
                s->bound == Bound::kInput
                    ? "it starts its steps late: data loading or the forward pass"
                    : "it produces its gradients slowly: the backward pass");
  return buf;
}

}  // namespace korovod
