// Noise accounting for launches on a shared machine (the peers harness's idea, in small):
// wait until the machine is idle before a launch, and measure how much CPU processes outside our
// launch used while it ran.
#pragma once

namespace korovod::bench {

// Blocks until the machine-wide busy CPU (/proc/stat: user+nice+system+irq+softirq) over 1 s
// windows is below `threshold` (a fraction of all cores), or `max_wait_s` passed. We run nothing
// meanwhile, so all of it is foreign. Returns the seconds waited; *busy gets the last window's
// fraction.
double WaitQuiet(double max_wait_s, double threshold, double* busy);

// Busy CPU of the whole machine minus the CPU our reaped children used (getrusage
// RUSAGE_CHILDREN), as a fraction of ncpu x wall time, between Start() and Stop(). Only children
// reaped before Stop() count as ours, which LaunchRanks guarantees.
class ForeignCpuMeter {
 public:
  void Start();
  // Returns the foreign fraction (0: nobody else ran; clamped at 0).
  double Stop() const;

 private:
  double busy0_ = 0, ours0_ = 0, wall0_ = 0;
};

}  // namespace korovod::bench
