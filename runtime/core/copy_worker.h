// CopyWorker: the engine's second thread for fusion-buffer copies, so that the copies into and out
// of one segment of a fused allreduce overlap the collective of the next (OpExecutor's pipeline).
// Tasks run one at a time, in the order posted; Drain waits until all posted tasks have run.
// Tasks must not throw (they are the executor's memcpys and timeline marks).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace korovod {

class CopyWorker {
 public:
  CopyWorker();
  ~CopyWorker();  // runs what is queued, then joins
  CopyWorker(const CopyWorker&) = delete;
  CopyWorker& operator=(const CopyWorker&) = delete;

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
