// CollectiveLanes: several allreduces of the world in flight at once. Each lane is a thread with
// its own OpExecutor over its own connections to every peer (Communicator::TakeLanes), so that a
// collective waiting out the network's latency does not hold up the next one (Gloo's async work
// and NCCL's channels overlap theirs the same way). Every rank dispatches the same collectives in
// the same order and the lanes take them in turn, so each collective meets its peers on the same
// lane everywhere; a lane runs its jobs in the order dispatched.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "runtime/core/negotiation_messages.h"
#include "runtime/core/op_executor.h"
#include "runtime/core/pending_op.h"
#include "runtime/core/serial_worker.h"
#include "runtime/core/timeline/timeline.h"
#include "runtime/world/communicator.h"

namespace korovod {

class CollectiveLanes {
 public:
  // One planned collective: the responses it runs (copied: the cycle that planned them is gone
  // by the time it runs) and this rank's ops, owned until completion (null: this rank joined
  // without the tensor and contributes the identity).
  struct Job {
    std::vector<Response> responses;
    std::vector<std::unique_ptr<PendingOp>> ops;
  };
  // Called on the lane's thread once a job has run (or been refused because a lane failed):
  // completes its ops. `data_plane` is the collective's failure (the lanes are then broken).
  using Finish = std::function<void(Job& job, std::vector<OpExecutor::Item>& items,
                                    const Status& data_plane, uint64_t bytes, uint64_t segments)>;

  CollectiveLanes(std::vector<std::unique_ptr<Communicator>> comms, bool pipeline, Finish finish);
  // Destruction runs (or, once broken, refuses) what is queued, then joins.
  CollectiveLanes(const CollectiveLanes&) = delete;
  CollectiveLanes& operator=(const CollectiveLanes&) = delete;

  int size() const { return static_cast<int>(lanes_.size()); }
  // Queues `job` on the next lane in turn (engine thread).
  void Dispatch(Job job);
  // Waits until every dispatched job has finished.
  void Drain();
  // The first data plane failure of any lane (or the one given to Fail); OK while none failed.
  Status health() const;
  // The most lanes that were running a job at the same time, so far.
  int peak_busy() const;
  // The engine failed elsewhere: jobs not yet started finish with `why` instead of running.
  void Fail(const Status& why);
  // Only while drained (the lanes' threads read these between jobs).
  void set_timeline(Timeline* t);
  void Tune(size_t small_allreduce_max_bytes, size_t tcp_stripe_min);

 private:
  struct Lane {
    explicit Lane(std::unique_ptr<Communicator> c) : comm(std::move(c)), executor(*comm) {}
    std::unique_ptr<Communicator> comm;
    OpExecutor executor;
    SerialWorker worker;  // last: drained and joined before the members its jobs use
  };
  void Run(Lane& lane, Job& job);

  Finish finish_;
  mutable std::mutex mu_;  // guards health_, busy_ and peak_busy_
  Status health_;
  int busy_ = 0;  // lanes running a job
  int peak_busy_ = 0;
  size_t next_ = 0;                           // engine thread only
  std::vector<std::unique_ptr<Lane>> lanes_;  // last: destroyed (drained) first
};

}  // namespace korovod
