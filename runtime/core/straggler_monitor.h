// StragglerMonitor: who waits for whom. Every rank sees, in each state exchange of the world, which
// ranks have ops in flight and which cached tensors each has submitted; between two exchanges a
// rank that lacks a tensor others have submitted (or has nothing in flight while others do) is
// being waited for, and a rank with a submitted tensor that another lacks is waiting. Every rank
// sees the same exchanges, so every rank computes the same figures for every rank.
//
// A step is a busy period of the world: from an exchange where some rank has ops in flight to the
// next where none has. A step's straggler is the rank the others waited for longest in it, when
// that is more than the threshold. A rank that is the straggler of most steps is named, as
// input-bound when most of the wait for it came before its first op of the step (it started the
// step late: data loading, the forward pass) and compute-bound when it came after (it submitted
// its gradients slowly: the backward pass).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace korovod {

class StragglerMonitor {
 public:
  // One rank's state as the exchange shows it.
  struct RankView {
    bool in_flight = false;  // it has ops in flight in the world
    bool lacks = false;      // some other rank has submitted a cached tensor that it has not
    bool holds = false;      // it has submitted a cached tensor that some other rank has not
  };
  // What one rank was doing between an exchange that showed `views` and the next (both may hold:
  // waiting on one tensor while the others wait on another).
  struct Activity {
    bool waited_for = false;  // lacks what others have, or has nothing in flight while others do
    bool waiting = false;     // has ops in flight that others hold up
  };
  static std::vector<Activity> Activities(const std::vector<RankView>& views);

  // Per rank, since start.
  struct RankTotals {
    double waited_for_others_s = 0;     // it had ops in flight and waited for other ranks
    double others_waited_for_me_s = 0;  // others waited for it (before + after its first op)
    double waited_before_first_s = 0;   // ... before its first op of the step
    double waited_after_first_s = 0;    // ... after it
    uint64_t last_steps = 0;            // steps in which it was the straggler
  };
  enum class Bound { kInput, kCompute };
  struct Straggler {
    int rank = -1;
    uint64_t last_steps = 0;
    uint64_t steps = 0;
    double median_wait_s = 0;  // the others' wait for it in the steps it was last, median
    Bound bound = Bound::kCompute;
  };

  StragglerMonitor(int ranks, std::chrono::microseconds threshold);

  // One exchange of the world at `now` (views.size() == ranks; others are ignored).
  void Observe(Clock::time_point now, const std::vector<RankView>& views);

  int ranks() const { return static_cast<int>(totals_.size()); }
  const RankTotals& totals(int rank) const { return totals_[rank]; }
  uint64_t steps() const { return steps_; }
  // The rank that was the straggler in more than half of at least `min_steps` steps.
  std::optional<Straggler> FindStraggler(uint64_t min_steps) const;
  // One line naming the straggler (describe(rank) names a rank), or empty when there is none.
  std::string StragglerLine(uint64_t min_steps,
                            const std::function<std::string(int)>& describe) const;

 private:
  void EndStep();

  std::chrono::microseconds threshold_;
  std::vector<RankTotals> totals_;
  std::vector<RankView> previous_;
  Clock::time_point previous_at_{};
  bool have_previous_ = false;
  bool in_step_ = false;
  uint64_t steps_ = 0;
  std::vector<double> step_before_, step_after_;  // this step's wait for each rank
  std::vector<bool> started_;                     // it has had ops in flight in this step
  // Per rank, the others' wait for it in each step it was last (bounded: the latest 4096).
  std::vector<std::vector<double>> last_waits_;
  std::vector<double> last_before_, last_after_;  // summed over the steps it was last
};

const char* BoundName(StragglerMonitor::Bound b);

}  // namespace korovod
