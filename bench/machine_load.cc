#include "bench/machine_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace korovod::bench {
namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Busy seconds of all cores since boot: user + nice + system + irq + softirq (guest time is
// inside user).
double MachineBusyS() {
  std::ifstream f("/proc/stat");
  std::string line;
  std::getline(f, line);
  std::istringstream in(line);
  std::string cpu;
  long long v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  in >> cpu;
  for (long long& x : v) in >> x;
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6]) / hz;
}

double ChildrenCpuS() {
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

double Cores() { return static_cast<double>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))); }

}  // namespace

double WaitQuiet(double max_wait_s, double threshold, double* busy) {
  const double t0 = NowS();
  while (true) {
    const double b0 = MachineBusyS(), w0 = NowS();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    *busy = (MachineBusyS() - b0) / ((NowS() - w0) * Cores());
    const double waited = NowS() - t0;
    if (*busy < threshold || waited >= max_wait_s) return waited;
  }
}

void ForeignCpuMeter::Start() {
  busy0_ = MachineBusyS();
  ours0_ = ChildrenCpuS();
  wall0_ = NowS();
}

double ForeignCpuMeter::Stop() const {
  const double wall = NowS() - wall0_;
  if (wall <= 0) return 0;
  const double foreign = (MachineBusyS() - busy0_) - (ChildrenCpuS() - ours0_);
  return std::max(0.0, foreign / (wall * Cores()));
}

}  // namespace korovod::bench
