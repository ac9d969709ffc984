// SerialWorker: a thread that runs posted tasks one at a time, in the order posted; Drain waits
// until all posted tasks have run. The engine's copy thread (OpExecutor's pipeline: the copies into
// and out of one segment of a fused allreduce overlap the collective of the next) and each
// collective lane (collective_lanes.h) are one. Tasks must not throw.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace korovod {

class SerialWorker {
 public:
  SerialWorker();
  ~SerialWorker();  // runs what is queued, then joins
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  void Post(std::function<void()> task);
  void Drain();

 private:
  void Loop(std::stop_token stop);

  std::mutex mu_;
  std::condition_variable_any work_;
  std::condition_variable done_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  std::jthread thread_;  // last: started after, and joined before, the members it uses
};

}  // namespace korovod
