// Engine: the Horovod core for one rank. Trainer threads submit named tensor operations and get
// handles; a background thread runs the cycle: every `cycle_time` each rank reports the tensors it
// has ready, the coordinator (rank 0 of each process set) decides which are ready everywhere and
// in which order, and every rank executes that same sequence, packing small tensors into fusion
// buffers. Tensors negotiated before are agreed on through the response cache's bit vector.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/engine_stats.h"
#include "common/status.h"
#include "runtime/core/engine_config.h"
#include "runtime/core/op_request.h"
#include "runtime/device/device_collectives.h"
#include "runtime/world/communicator.h"

namespace korovod {

class OpHandle;
using DoneCallback = std::function<void(const Status&, const OpResult&)>;

class Engine {
 public:
  // Takes the connected communicator. Checks that every rank runs with the same settings (the
  // error names the setting and the ranks), measures clock offsets to rank 0 for the timeline, and
  // starts the background thread.
  // `device`: how to run ops on device tensors (OpRequest::device >= 0); without one they are
  // refused at Submit.
  static StatusOr<std::unique_ptr<Engine>> Start(std::unique_ptr<Communicator> comm,
                                                 const EngineConfig& config,
                                                 DeviceBackend device = {});
  ~Engine();  // Shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const;
  int size() const;

  // Any thread. Invalid requests (bad shape, unknown process set, a name already in flight on this
  // rank) are refused here with InvalidArgument. `done` runs on the background thread before
  // waiters on the handle wake; it must not block on other ops.
  StatusOr<OpHandle> Submit(OpRequest request, DoneCallback done = {});
  // Grouped allreduce: the tensors are released and fused together once all are ready everywhere.
  StatusOr<std::vector<OpHandle>> SubmitGroup(std::vector<OpRequest> requests,
                                              DoneCallback done = {});
  // The same with one callback per request (`done[i]` for `requests[i]`; the callback does not
  // say which tensor it completes, and a group's members may complete in any order).
  StatusOr<std::vector<OpHandle>> SubmitGroup(std::vector<OpRequest> requests,
                                              std::vector<DoneCallback> done);

  // Collective over the world: every rank calls it with the same ranks, in the same order relative
  // to other AddProcessSet calls. Returns the new set's id (> 0), the same on every rank.
  // Fails with FailedPrecondition on every rank when a set of the same ranks exists (the world
  // included), as Horovod refuses duplicate process sets.
  StatusOr<int> AddProcessSet(std::vector<int> ranks, Deadline deadline);

  // Collective over the world, like AddProcessSet: every rank calls it with the same id, in the
  // same order relative to other AddProcessSet/RemoveProcessSet calls. Ops of this rank still in
  // flight on the set fail with Aborted naming the set. Returns false (on this rank, at once, with
  // nothing exchanged) when no set has that id; the world (id 0) is never removed.
  StatusOr<bool> RemoveProcessSet(int id, Deadline deadline);

  // The size of a registered set and this rank's position in it (-1: not a member).
  struct SetInfo {
    int size = 0;
    int rank = -1;
  };
  StatusOr<SetInfo> ProcessSetInfo(int id) const;

  // Timeline at run time; `path` may contain "{rank}".
  Status StartTimeline(const std::string& path, bool mark_cycles);
  Status StopTimeline();

  EngineStats stats() const;
  // One line naming the rank the others waited for in most of at least `min_steps` steps, and
  // whether it is input- or compute-bound (runtime/core/straggler_monitor.h); empty if none.
  std::string StragglerLine(uint64_t min_steps = 10) const;
  // The error that stopped the engine (peer failure, stall shutdown), or OK while running. After
  // an orderly shutdown it is ABORTED naming the rank that asked, and shut_down_in_order() says so.
  Status health() const;
  // True once the ranks agreed to stop because a trainer shut down (hvd.shutdown, the job's end):
  // an orderly end, not a failure to report as one.
  bool shut_down_in_order() const;

  // From any thread: fails this rank's collectives with `why` within a poll slice (its peers get
  // the cause through the mesh), and the engine stops as on a peer failure. For a cause only the
  // caller can see: an elastic member the driver removed while its connections still stand.
  void Abort(const Status& why);

  // Tells every rank to stop at the end of the current cycle (any rank may start it); ops still in
  // flight fail with Aborted naming the rank that shut down. Blocks until the thread has exited.
  void Shutdown();

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The shared completion state of one op.
struct OpState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  OpResult result;
  DoneCallback callback;
  std::string name;
};

class OpHandle {
 public:
  OpHandle() = default;
  explicit OpHandle(std::shared_ptr<OpState> s) : state_(std::move(s)) {}

  bool Poll() const;
  // Waits until the op completes or the deadline passes (DeadlineExceeded naming the tensor; the
  // op stays in flight). Returns the op's status.
  Status Wait(Deadline deadline = Deadline::Infinite()) const;
  // Valid once Poll() is true.
  const OpResult& result() const { return state_->result; }
  OpResult& mutable_result() { return state_->result; }
  const std::string& name() const { return state_->name; }
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<OpState> state_;
};

}  // namespace korovod
